"""Microsoft Graph change notifications: the webhook every replica serves, turning notifications into
change hints in the shared container (the subscriptions themselves are kept by an elected manager)."""

"""The Graph resources the service calls, one small client each over the shared transport."""

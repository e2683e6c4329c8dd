"""Where the fleet's shared operational state lives: the MemoryBackend protocol (``backend``) and its
backends (``local``, ``blob``).

Nothing is re-exported here on purpose: importing ``service.storage.errors`` must not load the Azure
SDK (half a second), which every command line would otherwise pay, ``--version`` included.
"""

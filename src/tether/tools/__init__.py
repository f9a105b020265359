"""What a tool is: the registry of pinned manifests, argument schemas, limits and tenancy."""

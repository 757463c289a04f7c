"""User-facing objects: actors, endpoints, meshes, futures, ports and context."""

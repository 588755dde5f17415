"""Generated holdfast.lock.v1 API (protoc + protoc-gen-connectrpc). Do not edit."""

"""Generated protobuf messages (protoc --python_out; `make proto`) and the
gRPC stubs built from their service descriptors."""

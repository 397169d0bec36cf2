"""gRPC stubs built from the generated service descriptors.

grpc_tools (protoc's gRPC plugin for Python) is not a Debian package, so
instead of generated *_pb2_grpc.py files the stubs are made here, one
unary-unary callable per method, with grpc's generic API.
"""


class Stub:
    """stub.Method(request, timeout=...) for every method of a service."""

    def __init__(self, channel, pb2, service):
        desc = pb2.DESCRIPTOR.services_by_name[service]
        for m in desc.methods:
            req = getattr(pb2, m.input_type.name)
            resp = getattr(pb2, m.output_type.name)
            call = channel.unary_unary(
                "/%s/%s" % (desc.full_name, m.name),
                request_serializer=req.SerializeToString,
                response_deserializer=resp.FromString,
            )
            setattr(self, m.name, call)

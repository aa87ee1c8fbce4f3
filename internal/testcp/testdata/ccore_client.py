"""A proxyless gRPC client on gRPC C-core (Python's grpcio) for the tests.

It dials xds:///TARGET and, for each key read from stdin, calls
grpc.testing.TestService/UnaryCall with HEADER=key, writing
"key<TAB>backend" (or "key<TAB>!error") per line. The backend is the
hostname field (6) of the SimpleResponse, read without generated code.

    GRPC_XDS_BOOTSTRAP_CONFIG=... python3 ccore_client.py products x-product-id
"""
import sys

import grpc


def hostname(buf):
    i = 0

    def varint():
        nonlocal i
        v, shift = 0, 0
        while True:
            b = buf[i]
            i += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return v

    while i < len(buf):
        tag = varint()
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            varint()
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        elif wire == 2:
            n = varint()
            if field == 6:
                return buf[i:i + n].decode()
            i += n
        else:
            raise ValueError("unexpected wire type %d" % wire)
    return ""


def main():
    target, header = sys.argv[1], sys.argv[2].lower()
    channel = grpc.insecure_channel("xds:///" + target)
    call = channel.unary_unary("/grpc.testing.TestService/UnaryCall")
    for line in sys.stdin:
        key = line.strip()
        if not key:
            continue
        try:
            resp = call(b"", metadata=((header, key),), timeout=10, wait_for_ready=True)
            out = hostname(resp)
        except grpc.RpcError as err:
            out = "!%s %s" % (err.code(), (err.details() or "").replace("\t", " ").replace("\n", " "))
        sys.stdout.write("%s\t%s\n" % (key, out))
        sys.stdout.flush()
    channel.close()


if __name__ == "__main__":
    main()

# The far end of push-bench, run in a Debian room: a connection starting
# with "P" is counted to its end and answered with the count; one starting
# with "G<count>\n" gets that many zero bytes, then the close.
import socket, sys, threading
port = int(sys.argv[1])
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", port)); srv.listen(8)
open("/tmp/sink.%d" % port, "w").close()
zeros = bytes(1 << 20)

def serve(c):
    buf = bytearray(1 << 20)
    first = c.recv(1)
    if first == b"P":
        n = 0
        while True:
            k = c.recv_into(buf)
            if not k:
                break
            n += k
        c.sendall(b"%d\n" % n)
    elif first == b"G":
        line = b""
        while not line.endswith(b"\n"):
            line += c.recv(1)
        left = int(line)
        view = memoryview(zeros)
        while left > 0:
            k = min(left, len(zeros))
            c.sendall(view[:k])
            left -= k
    c.close()

while True:
    c, _ = srv.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()

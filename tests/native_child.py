"""A symjac native-protocol child in plain Python with one planted fault (the tests' bad kernels).

    python native_child.py MODE [MARKER]

It answers every request with zeros of the output symjac expects (and the inputs
unchanged), except as MODE says. With MARKER (a file path), the fault happens only while
the file does not exist, and the child creates it as it misbehaves: a restarted child
then answers properly, so a test sees the restart work. No NumPy: plain bytes.
"""

import os
import signal
import sys
import time

SIZES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int64": 8, "int32": 4}
MODE = sys.argv[1]
MARKER = sys.argv[2] if len(sys.argv) > 2 else None
IN, OUT = sys.stdin.buffer, sys.stdout.buffer
#: strict mode: the request's call keys and a loss's mandatory settings (docs/native.md)
STRICT_KEYS = {"id", "op", "poison", "perturb", "repeat", "bytes", "operator", "kind", "reduction", "scale"}


def size(words):
    n = SIZES[words[1]]
    for d in words[3:]:
        n *= int(d)
    return n


def faulty():
    if MARKER is None:
        return True
    if os.path.exists(MARKER):
        return False
    open(MARKER, "w").close()
    return True


def main():
    if MODE == "answer_first" and faulty():  # answers a request never made (id 0), before reading one
        OUT.write(b"symjac 1 response\nid 0\nop backward\nstatus ok\noutput dx float64 0\nbytes 8\n\n" + b"\0" * 8)
        OUT.flush()
    while True:
        if not IN.readline():
            return
        fields, inputs, output = {}, [], None
        while True:
            line = IN.readline().decode().rstrip("\n")
            if not line:
                break
            key, _, value = line.partition(" ")
            if key == "input":
                inputs.append(value.split())
            elif key == "output":
                output = value.split()
            else:
                fields[key] = value
        IN.read(int(fields["bytes"]))
        fault = MODE if faulty() else "ok"
        if fault == "strict":  # a loss driver that refuses every setting it does not know
            unknown = sorted(set(fields) - STRICT_KEYS)
            fault = "refuse" if unknown else "ok"
        lines = ["symjac 1 response", f"id {fields['id']}", f"op {fields['op']}", "status ok",
                 "output " + " ".join(output)]
        data = b"\0" * size(output)
        for i, words in enumerate(inputs):
            if fault == "mutate" and i == 0:  # x (or pred) comes back as zeros
                lines.append("input " + " ".join(words))
                data += b"\0" * size(words)
            else:
                lines.append(f"input {words[0]} same")
        if fault == "wrong_id":
            lines[1] = f"id {int(fields['id']) + 1}"
        if fault == "refuse":
            lines[3:] = ["status error", "message unknown setting " + " ".join(unknown) if MODE == "strict"
                         else "message no such kernel here"]
            data = b""
        lines.append(f"bytes {len(data) + (8 if fault == 'wrong_bytes' else 0)}")
        message = ("\n".join(lines) + "\n\n").encode() + data
        if fault == "hang":
            time.sleep(3600)
        elif fault == "exit3":
            sys.exit(3)
        elif fault == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        elif fault == "garbage":
            message = b"hello, I am not a kernel\n\n"
        elif fault == "short_exit":
            message = message[:-4]
        elif fault == "short_hang":
            OUT.write(message[:-4])
            OUT.flush()
            time.sleep(3600)
        elif fault == "extra":
            message += b"EXTRA!!!"
        elif fault == "twice":  # the same answer again, a moment later: out of turn at the next request
            OUT.write(message)
            OUT.flush()
            time.sleep(0.2)
        elif fault == "huge":  # announces 2 GiB of dx (2^28 float64), sends 1 MiB of it, then waits
            head = lines[:4] + ["output dx float64 1 268435456"] + [line for line in lines if line.startswith("input")]
            OUT.write(("\n".join(head + ["bytes 2147483648"]) + "\n\n").encode() + b"\0" * (1 << 20))
            OUT.flush()
            time.sleep(3600)
        elif fault == "chatty":  # 1 MiB on stderr first: more than a pipe holds
            sys.stderr.buffer.write(b"x" * (1 << 20))
            sys.stderr.flush()
        OUT.write(message)
        OUT.flush()
        if fault in ("short_exit", "one_shot"):  # one_shot: a program serving one request per run
            return
        if fault == "exit_after":  # answers, then fails on its way out
            sys.exit(3)


main()

"""Which tests a dead pytest-xdist worker took down, read from a JUnit XML report.

Prints the node ids (one a line) of the tests it failed ("worker 'gwN' crashed while running
'NODE'", pytest-xdist's words for a worker process that died) and of the collected tests the
report never mentions (those the dead worker had yet to run), and exits 0, when every failure or
error of the report is such a death; exits 1 when any failure is a test's own (or none is a
death). ``.ci/run`` reruns the tests it prints in one process: a worker's death is named in
the log, a test's own failure is never retried.

Usage: python .ci/crashed.py JUNIT_XML COLLECTED   (COLLECTED: ``pytest --collect-only -q`` output)
"""

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

CRASHED = re.compile(r"worker '[^']+' crashed while running '([^']+)'")


def node_id(case: ET.Element) -> str:
    """tests/test_x.py::Class::name from a testcase's classname (dotted module, then classes) and name."""
    parts = (case.get("classname") or "").split(".")
    for cut in range(len(parts), 0, -1):
        path = "/".join(parts[:cut]) + ".py"
        if Path(path).is_file():
            return "::".join([path, *parts[cut:], case.get("name") or ""])
    return "::".join([*parts, case.get("name") or ""])


def main(junit: str, collected: str) -> int:
    crashed, other, seen = [], 0, set()
    for case in ET.parse(junit).getroot().iter("testcase"):
        seen.add(node_id(case))
        for bad in [*case.iter("failure"), *case.iter("error")]:
            found = CRASHED.search((bad.get("message") or "") + "\n" + (bad.text or ""))
            if found:
                crashed.append(found.group(1))
            else:
                other += 1
    if other or not crashed:
        return 1
    ids = [line.strip() for line in Path(collected).read_text().splitlines() if "::" in line]
    print("\n".join(dict.fromkeys(crashed + [i for i in ids if i not in seen])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))

"""List the flags a vLLM release's `vllm serve` accepts, from its wheel, without installing it.

    pip download --no-deps vllm==0.33.0 -d /tmp/vllm && \
        python deploy/vllm/extract_flags.py /tmp/vllm/vllm-0.33.0-*.whl > deploy/vllm/flags-0.33.0.txt

vLLM builds its --help from the fields of EngineArgs and FrontendArgs plus a
few arguments its CLI adds; running `vllm serve --help` itself needs vLLM's GPU
dependencies installed, which this project's machines do not have.
"""

from __future__ import annotations

import ast
import re
import sys
import zipfile

DATACLASSES = {
    "vllm/engine/arg_utils.py": {"EngineArgs", "AsyncEngineArgs"},
    "vllm/entrypoints/common/cli_args.py": {"BaseFrontendArgs", "FrontendArgs"},
}


def flags(wheel: str) -> set[str]:
    out: set[str] = set()
    with zipfile.ZipFile(wheel) as z:
        for path, classes in DATACLASSES.items():
            tree = ast.parse(z.read(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.name in classes:
                    for item in node.body:
                        if (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                                and not item.target.id.startswith("_") and "ClassVar" not in ast.unparse(item.annotation)):
                            out.add("--" + item.target.id.replace("_", "-"))
        for name in z.namelist():
            if name.startswith("vllm/entrypoints/cli/") and name.endswith(".py") or name in DATACLASSES:
                out.update(re.findall(r'"(--[a-z0-9-]+)"', z.read(name).decode()))
    return out


if __name__ == "__main__":
    version = sys.argv[1].split("vllm-")[-1].split("-")[0]
    print(f"# Flags `vllm serve` accepts in vLLM {version}, read from that release's wheel: the fields of")
    print("# EngineArgs and FrontendArgs (vLLM builds its --help from them) and the arguments its CLI adds.")
    print("# Regenerate with deploy/vllm/extract_flags.py when the pinned version changes.")
    print("\n".join(sorted(flags(sys.argv[1]))))

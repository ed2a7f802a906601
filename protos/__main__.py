"""Regenerate (or with --check, verify) the Python code for every .proto in this folder."""
from __future__ import annotations

import argparse
import filecmp
import sys
import tempfile
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent
REPO_ROOT = PROTO_DIR.parent
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def generate(out_dir: Path) -> None:
    """Run protoc (from grpcio-tools) over protos/*.proto, writing under out_dir/protos/."""
    from grpc_tools import protoc  # imported here: only development installs have it
    import grpc_tools

    protos = sorted(str(p.relative_to(REPO_ROOT)) for p in PROTO_DIR.glob("*.proto"))
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    (out_dir / "protos").mkdir(parents=True, exist_ok=True)
    args = ["protoc", f"-I{REPO_ROOT}", f"-I{well_known}", f"--python_out={out_dir}",
            f"--pyi_out={out_dir}", f"--grpc_python_out={out_dir}", *protos]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")


def generated_files(root: Path) -> dict[str, Path]:
    return {p.name: p for p in (root / "protos").glob("*") if p.name.endswith(GENERATED_SUFFIXES)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if the committed code is stale")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        fresh = generated_files(Path(tmp))
        current = generated_files(REPO_ROOT)
        stale = sorted(name for name in fresh.keys() | current.keys()
                       if name not in fresh or name not in current
                       or not filecmp.cmp(fresh[name], current[name], shallow=False))
        if args.check:
            if stale:
                print(f"stale generated code: {', '.join(stale)}; run 'python -m protos'", file=sys.stderr)
                return 1
            print("generated code is up to date")
            return 0
        for name in stale:
            if name in fresh:
                (PROTO_DIR / name).write_bytes(fresh[name].read_bytes())
            else:
                (PROTO_DIR / name).unlink()
        print(f"regenerated: {', '.join(stale) or 'nothing (already up to date)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

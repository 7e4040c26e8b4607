"""Real RocketMQ Java programs in tests: small Maven projects under ``tests/clients/java/<name>/`` (a ``pom.xml``
and ``src/main/java``), built on first use with the machine's Maven from Maven Central and cached by the hash of
their sources, then run with ``java -cp``.

    cp = java_classpath("pop-consumer")          # builds tests/clients/java/pop-consumer once
    proc = run_java("pop-consumer", "org.example.Main", ["127.0.0.1:9876", "T"], timeout=60)  # port-ok: an example in a docstring

``scripts/test`` installs a JDK and Maven when they are missing; the build runs in the test process, so a fresh
clone's test run fetches what it needs itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import threading
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
JAVA_DIR = ROOT / "tests" / "clients" / "java"
_BUILD_LOCK = threading.Lock()


def _sources_hash(project: pathlib.Path) -> str:
    h = hashlib.sha1()
    for p in sorted(project.rglob("*")):
        if p.is_file() and "target" not in p.relative_to(project).parts:
            h.update(str(p.relative_to(project)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:12]


def java_classpath(name: str, *, timeout: float = 900.0) -> str:
    """The classpath of ``tests/clients/java/<name>`` (its classes + dependencies), building it when its sources
    changed since the last build. Raises RuntimeError with Maven's output when the build fails."""
    project = JAVA_DIR / name
    if not (project / "pom.xml").is_file():
        raise FileNotFoundError(f"no Maven project at {project}")
    mvn = shutil.which("mvn")
    if mvn is None or shutil.which("java") is None:
        raise RuntimeError("java and mvn are required (scripts/test installs them)")
    with _BUILD_LOCK:
        stamp = project / "target" / f".built-{_sources_hash(project)}"
        cp_file = project / "target" / "classpath.txt"
        if not stamp.is_file() or not cp_file.is_file():
            cmd = [mvn, "-q", "-B", "package", "-DskipTests", "dependency:build-classpath",
                   f"-Dmdep.outputFile={cp_file}"]
            r = subprocess.run(cmd, cwd=project, capture_output=True, text=True, timeout=timeout)
            if r.returncode != 0:
                raise RuntimeError(f"maven build of {name} failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}")
            for old in (project / "target").glob(".built-*"):
                old.unlink()
            stamp.touch()
        deps = cp_file.read_text().strip()
    return os.pathsep.join([str(project / "target" / "classes"), deps])


def java_command(name: str, main_class: str, args: list[str], *, jvm_args: list[str] | None = None) -> list[str]:
    """The command line running ``main_class`` of project ``name`` (built when needed)."""
    return ["java", *(jvm_args or ["-Xmx256m", "-XX:+UseSerialGC", "-Xshare:auto"]), "-cp", java_classpath(name),
            main_class, *args]


def run_java(name: str, main_class: str, args: list[str], *, timeout: float = 120.0,
             env: dict[str, str] | None = None, **kw: Any) -> subprocess.CompletedProcess[str]:
    """Run ``main_class`` to completion, capturing its output (text)."""
    return subprocess.run(java_command(name, main_class, args), capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, **kw)


class JavaLines:
    """A long-running Java program of a test project that prints one JSON object per line (other lines are its
    log) and stops when its stdin is closed; the objects are collected as they arrive (`rows`)."""

    def __init__(self, cmd: list[str], cwd: pathlib.Path | None = None) -> None:
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, cwd=str(cwd) if cwd else None)
        self.rows: list[dict[str, Any]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.rows.append(json.loads(line))

    def of(self, key: str) -> list[Any]:
        """The values of the rows that have ``key`` (e.g. "sent", "recv"), in arrival order."""
        return [r[key] for r in list(self.rows) if key in r]

    def stop(self) -> None:
        """Close stdin (the program shuts down cleanly) and wait; killed after 30 s."""
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

"""The repository stands on its own: no tracked file names a path of the machine it was written on, or a document
that is not in the repository. Comments and docstrings cite Kafka classes, KIPs and JIRA ids instead."""

from __future__ import annotations

import re

from repo_files import ROOT, tracked_files

# (what is wrong, pattern); the patterns are spelt so that this file does not match them itself
FORBIDDEN = [
    ("a machine path", re.compile("/" + r"(work|root|home)/")),
    ("a folder beside the checkout", re.compile(r"\.\./shar" + r"ed\b|(?<![\w.-])shar" + r"ed/")),
    ("a document outside the repository", re.compile(
        r"\bseeds? \d{3}\b|\bthe " + r"seeds\b|\bthe " + r"article\b|\b(architecture|measurements)\.md\b"
        + r"|\bdevelopers' " + r"guide\b",
        re.IGNORECASE,
    )),
]
# third-party data, copied verbatim (their own README and comments are theirs)
EXEMPT = [ROOT / "schemas" / "kafka-protocol"]


def test_no_machine_paths_or_outside_documents() -> None:
    files = [p for p in tracked_files() if not any(p.is_relative_to(e) for e in EXEMPT)]
    assert len(files) > 100
    found = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary
        for lineno, line in enumerate(text.splitlines(), 1):
            for what, pattern in FORBIDDEN:
                if pattern.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{lineno}: {what}: {line.strip()[:120]}")
    assert not found, "references outside the repository (cite Kafka classes, KIPs, JIRA ids):\n" + "\n".join(found)

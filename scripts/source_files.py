"""The repository's files for the scripts that read its sources (check_layers.py, long_code.py)."""

import os
import subprocess


def repository_files(root, suffixes):
    """Repository-relative paths ('/'-separated, sorted) of the files under `root` ending in one of `suffixes`:
    git's tracked and untracked-but-not-ignored files, or, outside a git checkout, every file but those of
    hidden and build* folders."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             check=True, capture_output=True).stdout
        files = [p for p in out.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for directory, dirs, names in os.walk(root):
            dirs[:] = [d for d in dirs if not d.startswith(".") and not d.startswith("build")]
            files += [os.path.relpath(os.path.join(directory, n), root).replace(os.sep, "/") for n in names]
    return sorted(p for p in files if p.endswith(tuple(suffixes)) and os.path.isfile(os.path.join(root, p)))

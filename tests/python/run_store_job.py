"""One rank under fsdp-run serving the store: _C.RunStore (the launcher's store as a c10d.Store)
answers torch's compare_set with the store's atomic compare-and-set: of the ranks racing
compare_set(key, "", own name), one wins and every rank reads its name back."""
import datetime
import os
import sys

sys.path.insert(0, os.environ["FSDP_PYTHON_PATH"])
from fsdp_runtime import _C  # noqa: E402

rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
store = _C.RunStore.from_env(datetime.timedelta(seconds=30))
assert store is not None, "fsdp-run serves no store (FSDP_STORE_EXTERNAL unset)"
mine = f"rank{rank}".encode()
got = store.compare_set("test/winner", "", mine)
store.set(f"test/read/{rank}", got)
store.wait([f"test/read/{r}" for r in range(n)])
reads = {store.get(f"test/read/{r}") for r in range(n)}
assert reads == {store.get("test/winner")} and len(reads) == 1, reads
assert store.compare_set("test/winner", "wrong", "x") == got  # a mismatch changes nothing
if rank == 0:
    print(f"compare_set through RunStore: one winner ({got.decode()}) read by all {n} ranks", flush=True)

"""``hived serve`` on a damaged database: one line naming the file and what to do, its own
exit code, no traceback, and the file left as it was."""
import hashlib
import subprocess
import sys
from pathlib import Path

from hived.service.store import SqliteStore, StoreDamaged

SPEC = Path(__file__).with_name("spec_small.yaml")


def test_serve_refuses_a_damaged_database_with_its_exit_code(tmp_path):
    data = tmp_path / "data"
    s = SqliteStore(data)
    with s.transaction():
        for i in range(200):
            s.add_job({"job_id": f"j{i}", "state": "queued", "submitted": 1.0, "history": [],
                       "request": {"user": "alice", "vc": "vca", "pad": "x" * 500}}, now=1.0)
    s.close()
    db = data / "hived.db"
    raw = bytearray(db.read_bytes())
    raw[20 * 4096 + 8: 20 * 4096 + 300] = b"\x5a" * 292
    db.write_bytes(bytes(raw))
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    r = subprocess.run([sys.executable, "-m", "hived.cli.main", "serve", "--spec", str(SPEC),
                        "--data-dir", str(data), "--port", "0", "--allow-root"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == StoreDamaged.EXIT_CODE, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("hived serve:")]
    assert len(lines) == 1 and "Traceback" not in r.stderr
    assert str(db) in lines[0] and "damaged" in lines[0] and "move it away" in lines[0]
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    assert not (data / "server.json").exists()

"""Job ids never repeat for a data directory, even when its database is lost; a job's
folder is never reused; a damaged database is refused without being written to; the data
directory and every file of the store are private."""
import hashlib
import os
import re
import shutil
import sqlite3
import stat

import pytest

from hived.core.engine import RequestError
from hived.service.job_ids import FILE_NAME, JobIds, JobIdsError
from hived.service.store import SqliteStore, StoreDamaged, StoreError

JOB = {"vc": "vca", "command": "true", "gpus": 1}


def submit(svc, n):
    return [svc.submit("alice", dict(JOB))["id"] for _ in range(n)]


def number(jid):
    return int(jid[1:])


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def db_files(data):
    return [data / n for n in ("hived.db", "hived.db-wal", "hived.db-shm")]


def test_ids_continue_after_the_database_is_moved_away(make_service, tmp_path):
    data = tmp_path / "data"
    svc = make_service(data_dir=data, start=False)
    old = submit(svc, 3)
    assert old == ["j1", "j2", "j3"]
    svc.tick()   # launched: j1.. have folders (logs, work)
    assert (data / "jobs" / "j1").is_dir()
    svc.close()
    moved = tmp_path / "moved"
    moved.mkdir()
    for f in db_files(data):
        if f.exists():
            shutil.move(f, moved / f.name)
    again = make_service(data_dir=data, start=False)
    new = submit(again, 2)
    assert min(map(number, new)) > 3 and not set(new) & set(old)
    assert again.list_jobs()[0]["id"] == new[0]


def test_ids_continue_above_old_job_folders_when_the_ids_file_is_gone_too(make_service, tmp_path):
    data = tmp_path / "data"
    svc = make_service(data_dir=data, start=False)
    submit(svc, 2)
    svc.close()
    for f in db_files(data) + [data / FILE_NAME]:
        if f.exists():
            f.unlink()
    (data / "jobs" / "j40" / "work").mkdir(parents=True)
    (data / "jobs" / "j40" / "work" / "ck.json").write_text("{}")
    again = make_service(data_dir=data, start=False)
    new = submit(again, 1)[0]
    assert number(new) == 41 and not (data / "jobs" / new).exists()


def test_a_new_job_never_takes_an_existing_folder(tmp_path):
    jobs = tmp_path / "jobs"
    ids = JobIds(tmp_path, jobs)
    assert ids.next() == "j1"
    (jobs / "j2").mkdir(parents=True)   # left behind by someone, between two submissions
    assert ids.next() == "j3"
    assert ids.next(taken=lambda j: j == "j4") == "j5"
    ceiling = int((tmp_path / FILE_NAME).read_text())
    assert ceiling > 5
    # a fresh reader (after a restart) starts at the ceiling written, and raises it before use
    assert number(JobIds(tmp_path, jobs).next()) == ceiling
    assert int((tmp_path / FILE_NAME).read_text()) > ceiling


def test_damaged_ids_file_is_refused_with_what_to_do(tmp_path):
    (tmp_path / FILE_NAME).write_text("not a number")
    with pytest.raises(JobIdsError, match=f"{FILE_NAME}: damaged .*write in it a number above every old job id"):
        JobIds(tmp_path, tmp_path / "jobs")


def test_ids_survive_a_wal_cut_short(make_service, tmp_path):
    """Committed transactions after a damaged WAL frame are lost by SQLite without an error;
    the ids handed out in them are still never handed out again."""
    data = tmp_path / "data"
    svc = make_service(data_dir=data, start=False)
    submit(svc, 2)
    svc.store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    later = submit(svc, 3)              # only in the WAL
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in db_files(data) + [data / FILE_NAME]:
        shutil.copy(f, copy / f.name)   # as a power cut would leave them
    wal = copy / "hived.db-wal"
    raw = bytearray(wal.read_bytes())
    raw[32 + 24 + 100] ^= 0xFF          # inside the first frame's page: its checksum fails
    wal.write_bytes(bytes(raw))
    svc.close()
    again = make_service(data_dir=copy, start=False)
    assert {j["id"] for j in again.list_jobs()} == {"j1", "j2"}   # the WAL's jobs are gone
    new = submit(again, 1)[0]
    assert number(new) > max(map(number, later))


def test_emptied_database_is_refused_untouched(make_service, tmp_path):
    data = tmp_path / "data"
    svc = make_service(data_dir=data, start=False)
    submit(svc, 2)
    svc.close()
    for f in db_files(data)[1:]:
        f.unlink(missing_ok=True)
    (data / "hived.db").write_bytes(b"")
    with pytest.raises(StoreDamaged) as err:
        make_service(data_dir=data, start=False)
    msg = str(err.value)
    assert "\n" not in msg and str(data / "hived.db") in msg and "empty (0 bytes)" in msg
    assert "move it away" in msg and re.search(r"job ids continue after j(\d+)", msg)
    assert int(re.search(r"job ids continue after j(\d+)", msg).group(1)) >= 2
    assert (data / "hived.db").stat().st_size == 0 and not (data / "hived.db-wal").exists()


def _store_with_jobs(tmp_path, n=300):
    s = SqliteStore(tmp_path)
    with s.transaction():
        for i in range(n):
            s.add_job({"job_id": f"j{i}", "state": "queued", "submitted": 1.0, "history": [],
                       "request": {"user": "alice", "vc": "vca", "pad": "x" * 500}}, now=1.0)
    s.close()   # checkpointed into hived.db
    return tmp_path / "hived.db"


@pytest.mark.parametrize("check,pragma", [("full", "integrity_check"), ("quick", "quick_check")])
def test_corrupt_page_is_refused_without_writing(tmp_path, check, pragma):
    db = _store_with_jobs(tmp_path)
    raw = bytearray(db.read_bytes())
    page = int.from_bytes(raw[16:18], "big")
    for i in range(29 * page + 8, 29 * page + 400):   # a leaf page of the jobs table, past its header
        raw[i] = 0x5A
    db.write_bytes(bytes(raw))
    before = digest(db)
    with pytest.raises(StoreDamaged, match=rf"hived.db: the database is damaged \({pragma}: On tree page .*Restore it")\
            as err:
        SqliteStore(tmp_path, check=check)
    assert "\n" not in str(err.value)
    assert digest(db) == before and not (tmp_path / "hived.db-wal").exists()


def test_truncated_database_is_refused_without_writing(tmp_path):
    db = _store_with_jobs(tmp_path)
    with open(db, "r+b") as f:
        f.truncate(db.stat().st_size // 2)
    before = digest(db)
    with pytest.raises(StoreDamaged, match=r"truncated: \d+ bytes, the header says \d+ pages"):
        SqliteStore(tmp_path)
    assert digest(db) == before


def test_not_an_sqlite_file_is_not_called_damaged(tmp_path):
    (tmp_path / "hived.db").write_text("hello, I am a text file\n" * 10)
    with pytest.raises(StoreError, match="not a hived database") as err:
        SqliteStore(tmp_path)
    assert not isinstance(err.value, StoreDamaged)


def test_data_directory_and_store_files_are_private(make_service, tmp_path):
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    os.chmod(data, 0o755)
    svc = make_service(data_dir=data, start=False)
    submit(svc, 1)
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    for name in ("hived.db", "hived.db-wal", "hived.db-shm", FILE_NAME, "service.lock"):
        assert stat.S_IMODE((data / name).stat().st_mode) == 0o600, name
    svc.close()
    # a store left readable by an older hived is narrowed when opened
    os.chmod(data / "hived.db", 0o644)
    os.chmod(data, 0o755)
    make_service(data_dir=data, start=False)
    assert stat.S_IMODE((data / "hived.db").stat().st_mode) == 0o600
    assert stat.S_IMODE(data.stat().st_mode) == 0o700


def test_sqlite_itself_reads_what_the_checks_accept(tmp_path):
    db = _store_with_jobs(tmp_path, n=20)
    s = SqliteStore(tmp_path)
    assert s.count_jobs() == 20 and s.max_job_number() == 19
    s.close()
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()


def test_unreadable_job_record_is_refused_in_one_line(make_service, tmp_path):
    data = tmp_path / "data"
    svc = make_service(data_dir=data, start=False)
    submit(svc, 2)
    svc.close()
    con = sqlite3.connect(data / "hived.db")
    con.execute("UPDATE jobs SET record='{\"job_id\": \"j2\", trunc' WHERE job_id='j2'")
    con.commit()
    con.close()
    with pytest.raises(StoreDamaged, match=r"the record of job j2 is not JSON") as err:
        make_service(data_dir=data, start=False)
    assert "\n" not in str(err.value)


def test_refused_submissions_leave_no_gap(make_service):
    svc = make_service(start=False)
    assert svc.submit("alice", dict(JOB))["id"] == "j1"
    with pytest.raises(RequestError):
        svc.submit("alice", {"vc": "vca", "command": "true", "gpus": 9})
    assert svc.submit("alice", dict(JOB))["id"] == "j2"


def test_ids_go_on_without_a_jump_after_a_clean_restart(make_service, tmp_path):
    data = tmp_path / "data"
    svc = make_service(data)
    assert svc.submit("alice", {"vc": "vca", "command": "true"})["id"] == "j1"
    svc.stop(cancel_jobs=True, timeout=5)
    svc.close()
    again = make_service(data)
    assert again.submit("alice", {"vc": "vca", "command": "true"})["id"] == "j2"

"""Runs the ClickHouse statements of Troupe's event log on a current ClickHouse.

Reads the statements that eventlog/clickhouse's TestDumpStatements wrote (JSON:
the database, and each statement with its step and the external tables it was
sent with), and runs them in order in a chdb session (the ClickHouse engine as a
Python module) whose data lives in a temporary directory. A statement's external
tables are created, as Memory tables with their rows, before it and dropped after
it. A query whose number of rows the dump gives ("rows": what the events that the
dump appended before it make it return) fails if it returns another number.
Every statement runs, also after a failure; each failure is printed with its
step, its number, its SQL and the server's error. Exits 1 if any statement
failed, 2 if the dump cannot be read.

Usage: python clickhouse-compat.py DUMP.json
"""

import json
import shutil
import sys
import tempfile
import time

from chdb import session


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    try:
        with open(argv[1], encoding="utf-8") as f:
            dump = json.load(f)
        database, statements = dump["database"], dump["statements"]
    except (OSError, ValueError, KeyError) as e:
        print(f"clickhouse-compat: cannot read the dump {argv[1]}: {e}", file=sys.stderr)
        return 2
    if not statements:
        print(f"clickhouse-compat: the dump {argv[1]} has no statements", file=sys.stderr)
        return 2
    path = tempfile.mkdtemp(prefix="troupe-ch-compat.")
    started = time.monotonic()
    failures = 0
    try:
        s = session.Session(path)
        version = s.query("SELECT version()", "TSV").bytes().decode().strip()
        print(f"clickhouse-compat: ClickHouse {version} (chdb), {len(statements)} statements", file=sys.stderr)
        for n, st in enumerate(statements, 1):
            sql, tables = st["sql"], st.get("tables") or []
            created = []
            try:
                for t in tables:
                    s.query(f"CREATE TABLE {t['name']} ({t['structure']}) ENGINE = Memory")
                    created.append(t["name"])
                    if t.get("rows"):
                        s.query(f"INSERT INTO {t['name']} VALUES " + ", ".join(t["rows"]))
                out = s.query(sql, "TSV").bytes()
                want, got = st.get("rows"), out.count(b"\n")
                if want is not None and got != want:
                    failures += 1
                    print(f"\nFAIL statement {n} (step {st['step']!r}):\n{sql}\n--> returned {got} rows, want {want}:\n"
                          + out.decode(errors="replace"), file=sys.stderr)
                if sql.startswith("CREATE DATABASE"):
                    s.query(f"USE {database}")
            except Exception as e:  # chdb raises ChdbError (or RuntimeError in older builds)
                failures += 1
                print(f"\nFAIL statement {n} (step {st['step']!r}):\n{sql}\n--> {e}\n", file=sys.stderr)
            finally:
                for name in created:
                    s.query(f"DROP TABLE IF EXISTS {name}")
        s.close()
    finally:
        shutil.rmtree(path, ignore_errors=True)
    took = time.monotonic() - started
    if failures:
        print(f"clickhouse-compat: {failures} of {len(statements)} statements failed on ClickHouse {version} ({took:.1f} s)", file=sys.stderr)
        return 1
    print(f"clickhouse-compat: all {len(statements)} statements ran on ClickHouse {version} ({took:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

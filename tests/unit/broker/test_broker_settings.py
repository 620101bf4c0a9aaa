"""Broker settings: Kafka's names and synonyms, one-line errors naming the setting given, config sources, and
the settings reference (docs/settings.md) generated from the table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from oncelog.broker.settings.config import (
    DEFAULT_CONFIG,
    SETTINGS,
    STATIC_BROKER_CONFIG,
    BrokerConfig,
    ConfigError,
    Endpoint,
)

ROOT = Path(__file__).resolve().parents[3]


def test_kafka_names_are_accepted_and_older_names_stay_aliases() -> None:
    cfg = BrokerConfig.load(None, {"listeners": "PLAINTEXT://127.0.0.1:19092",
                                   "advertised.listeners": "PLAINTEXT://broker1.example.com:9092",
                                   "log.dir": "/var/lib/oncelog", "broker.id": "3"})
    assert cfg.listener == Endpoint("127.0.0.1", 19092)
    assert cfg.advertised == ("broker1.example.com", 9092)
    assert cfg.data_dir == Path("/var/lib/oncelog") and cfg.node_id == 3
    old = BrokerConfig.load(None, {"listener.host": "127.0.0.2", "listener.port": "9093", "advertised.port": "19093",
                                   "log.dirs": "d", "node.id": 4})
    assert (old.host, old.port, old.advertised, old.node_id) == ("127.0.0.2", 9093, ("127.0.0.2", 19093), 4)
    assert BrokerConfig.load(None, {"listeners": "127.0.0.1:0"}).listener == Endpoint("127.0.0.1", 0)


def test_a_setting_wins_over_its_synonym_whatever_the_order() -> None:
    cfg = BrokerConfig.load(None, {"log.retention.ms": "1000", "log.retention.hours": "5"})
    assert cfg.log_retention_ms == 1000
    assert BrokerConfig.load(None, {"log.retention.hours": "5"}).log_retention_ms == 5 * 3600_000
    assert BrokerConfig.load(None, {"log.retention.hours": "-1"}).log_retention_ms == -1


@pytest.mark.parametrize(("key", "value", "says"), [
    ("log.segment.bytes", "-5", "'log.segment.bytes': must be at least 14"),
    ("num.partitions", "0", "'num.partitions': must be at least 1"),
    ("default.replication.factor", "3", "single node"),
    ("log.retention.hours", "x", "'log.retention.hours': expected an integer"),
    ("listeners", "SASL_SSL://h:9092", "needs this broker's certificate: set ssl.keystore.location"),
    ("listeners", "FOO://h:9092", "listener FOO has no security protocol"),
    ("listeners", "localhost", "PLAINTEXT://HOST:PORT"),
    ("log.dirs", "/a,/b", "one folder"),
    ("listener.port", "70000", "'listener.port': a port is 0-65535"),
    ("log.cleanup.policy", "forever", "delete, compact"),
    ("auto.create.topics.enable", "maybe", "true or false"),
    ("log.retension.ms", "1", "unknown broker setting 'log.retension.ms' (did you mean 'log.retention.ms'?)"),
])
def test_bad_values_are_one_line_naming_the_setting_given(key: str, value: str, says: str) -> None:
    with pytest.raises(ConfigError) as e:
        BrokerConfig.load(None, {key: value})
    assert says in str(e.value) and "\n" not in str(e.value)


def test_checks_across_settings() -> None:
    with pytest.raises(ConfigError, match="advertised.listeners"):
        BrokerConfig.load(None, {"listeners": "PLAINTEXT://0.0.0.0:9092"})
    cfg = BrokerConfig.load(None, {"listeners": "0.0.0.0:9092", "advertised.listeners": "10.0.0.5:9092"})
    assert cfg.advertised == ("10.0.0.5", 9092)
    with pytest.raises(ConfigError, match="group.min.session.timeout.ms"):
        BrokerConfig.load(None, {"group.min.session.timeout.ms": 10_000, "group.max.session.timeout.ms": 5000})


def test_toml_file_flat_and_nested(tmp_path: Path) -> None:
    f = tmp_path / "broker.toml"
    f.write_text('"log.retention.hours" = 24\n"offset.metadata.max.bytes" = 100\n[log.segment]\nbytes = 1048576\n')
    cfg = BrokerConfig.load(f, {"log.segment.bytes": "2097152"})
    assert (cfg.log_retention_ms, cfg.offset_metadata_max_bytes, cfg.log_segment_bytes) == (86_400_000, 100, 2 << 20)
    f.write_text("num.partitions = 0\n")
    with pytest.raises(ConfigError, match="num.partitions"):
        BrokerConfig.load(f)
    with pytest.raises(ConfigError, match="does not exist"):
        BrokerConfig.load(tmp_path / "missing.toml")


def test_describe_reports_sources_and_synonyms_in_their_own_units() -> None:
    cfg = BrokerConfig.load(None, {"log.retention.hours": "48", "broker.id": "2"})
    entries = {e.key: e for e in cfg.entries()}
    assert entries["log.retention.ms"].value == str(48 * 3600_000)
    assert entries["log.retention.hours"].value == "48"
    assert entries["log.retention.minutes"].value == str(48 * 60)
    assert entries["log.retention.ms"].source == entries["log.retention.hours"].source == STATIC_BROKER_CONFIG
    assert entries["node.id"].source == entries["broker.id"].source == STATIC_BROKER_CONFIG
    assert entries["num.partitions"].source == DEFAULT_CONFIG
    assert entries["log.flush.interval.messages"].value == "1" and entries["listeners"].type == "LIST"
    assert all(e.doc for e in entries.values()), "every setting has a description"


def test_every_setting_has_a_description_and_a_default_that_passes_its_check() -> None:
    default = BrokerConfig()
    for s in SETTINGS.values():
        assert s.doc.strip(), s.key
        value = getattr(default, s.attr)
        if s.check is not None and value is not None:
            assert s.check(value) is None, s.key


def test_settings_reference_in_docs_matches_the_code() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_settings_doc.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr

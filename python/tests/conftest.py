"""The cluster the tests post to, from the environment the real-validator test
(`tests/tests/python.rs`) sets: CM_RPC, CM_KEYPAIR, CM_STORE, CM_MARKET."""
import os

import pytest


@pytest.fixture(scope="session")
def cluster():
    missing = [k for k in ("CM_RPC", "CM_KEYPAIR", "CM_STORE") if k not in os.environ]
    if missing:
        pytest.fail(f"{missing} unset: these tests run against a cluster that "
                    "tests/tests/python.rs starts (cargo nextest run -E 'binary(python)')")
    return {
        "rpc": os.environ["CM_RPC"],
        "keypair": os.environ["CM_KEYPAIR"],
        "store": os.environ["CM_STORE"],
        "market": int(os.environ.get("CM_MARKET", "1")),
    }


@pytest.fixture(scope="session")
def market(cluster):
    import compute_market as cm
    return cm.Market(cluster["rpc"], cluster["keypair"], cluster["market"],
                     store=cluster["store"], allow_private_urls=True)

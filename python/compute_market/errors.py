"""The exceptions the package raises. Every one is a :class:`MarketError`; each message names
the problem and what to do about it."""


class MarketError(Exception):
    """Something the market, the chain or a keeper refused or could not do."""


class InputError(MarketError, ValueError):
    """The job's input is wrong (dtype, shape, a text over the token limit, a batch over the
    job's bounds, an unknown option). Nothing was uploaded, posted or paid."""


class KeypairError(MarketError, ValueError):
    """The keypair is missing or is not a Solana keypair (a ``solana-keygen`` JSON file)."""


class ChainUnavailable(MarketError, ConnectionError):
    """The cluster's RPC does not answer. (A cluster without the program or the market raises
    :class:`MarketError` naming which.)"""


class InsufficientFunds(MarketError):
    """The wallet's stake-token account cannot pay the reward. Nothing was posted."""


class NoProvider(MarketError):
    """No provider of the market would take the job at these terms; posting it would leave it
    waiting until it expires. Change the job or its terms, or post with ``anyway=True``."""


class NotReady(MarketError):
    """The task has no verified result yet (it is Open, Claimed or Verifying): wait for it
    (:meth:`compute_market.Market.wait`)."""


class TaskFailed(MarketError):
    """A task ended without a verified result (Rejected, Undecided, Expired or Cancelled, its
    verdict final: the dispute window closed); its reward was refunded. :attr:`status` names how it ended, :attr:`task` which task it was."""

    def __init__(self, message, status=None, task=None):
        super().__init__(message)
        self.status = status
        self.task = task


class ResultUnavailable(MarketError):
    """No keeper served the Accepted result matching its on-chain root (the CLI's
    ``keeper task result`` can challenge its availability on chain)."""

"""The Multi-Particle Environments (MPE) on the jaxdrive contract, after mpe2 1.1.1.

One class per scenario (``continuous_actions`` picks mpe2's continuous variant), all
sharing `MPEEnv` (groups, spaces, reset, step, global state) and the physics of
`environments.mpe.world`. `SCENARIOS` maps mpe2's scenario names to the classes.

Example:
    >>> import jax
    >>> from environments.mpe import SimpleTag
    >>> env = SimpleTag(num_good=2, num_adversaries=4)
    >>> state, ts = env.reset(jax.random.key(0))
    >>> ts.obs["adversary"].shape, ts.obs["agent"].shape
    ((4, 22), (2, 20))
"""

from environments.mpe.base import MPEEnv
from environments.mpe.simple import Simple, SimpleParams
from environments.mpe.simple_adversary import SimpleAdversary, SimpleAdversaryParams
from environments.mpe.simple_crypto import SimpleCrypto, SimpleCryptoParams
from environments.mpe.simple_push import SimplePush, SimplePushParams
from environments.mpe.simple_reference import SimpleReference, SimpleReferenceParams
from environments.mpe.simple_speaker_listener import (
    SimpleSpeakerListener,
    SimpleSpeakerListenerParams,
)
from environments.mpe.simple_spread import SimpleSpread, SimpleSpreadParams
from environments.mpe.simple_tag import ChaseParams, SimpleTag, SimpleTagParams
from environments.mpe.simple_world_comm import SimpleWorldComm, SimpleWorldCommParams
from environments.mpe.world import MPEParams, MPEState, Role

#: mpe2's scenario name -> class.
SCENARIOS = {
    "simple": Simple,
    "simple_spread": SimpleSpread,
    "simple_tag": SimpleTag,
    "simple_adversary": SimpleAdversary,
    "simple_push": SimplePush,
    "simple_reference": SimpleReference,
    "simple_speaker_listener": SimpleSpeakerListener,
    "simple_world_comm": SimpleWorldComm,
    "simple_crypto": SimpleCrypto,
}

__all__ = [
    "SCENARIOS",
    "ChaseParams",
    "MPEEnv",
    "MPEParams",
    "MPEState",
    "Role",
    "Simple",
    "SimpleAdversary",
    "SimpleAdversaryParams",
    "SimpleCrypto",
    "SimpleCryptoParams",
    "SimpleParams",
    "SimplePush",
    "SimplePushParams",
    "SimpleReference",
    "SimpleReferenceParams",
    "SimpleSpeakerListener",
    "SimpleSpeakerListenerParams",
    "SimpleSpread",
    "SimpleSpreadParams",
    "SimpleTag",
    "SimpleTagParams",
    "SimpleWorldComm",
    "SimpleWorldCommParams",
]

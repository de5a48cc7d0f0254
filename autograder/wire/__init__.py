"""The wire: the only code both sides of the trust boundary import. :mod:`~autograder.wire.protocol`
(the messages between a runner child and a worker: plain data, size-checked, a nonce per request)
and :mod:`~autograder.wire.forbid` (the forbidden-call spec language the hidden suites write and
the sandbox's detector enforces). Nothing here imports another part of the grader.
"""

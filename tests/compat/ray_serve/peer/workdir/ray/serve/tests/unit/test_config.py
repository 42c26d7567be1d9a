"""The policy module Ray's config tests name, at Ray's path, in a workdir."""

fake_policy_return_value = 123


def fake_policy() -> int:
    return fake_policy_return_value

"""Places a cluster can live. Each provider module maps its SDK's failures to infra.base errors."""


def get_provider(name: str, **kwargs):
    """The provider for a cloud name; imports its SDK only when asked for."""
    if name == "local":
        from infra.local.provider import LocalProvider
        return LocalProvider(**kwargs)
    if name == "aws":
        from infra.aws.provider import AwsProvider
        return AwsProvider(**kwargs)
    if name == "gcp":
        from infra.gcp.provider import GcpProvider
        return GcpProvider(**kwargs)
    raise ValueError(f"unknown provider {name!r}")

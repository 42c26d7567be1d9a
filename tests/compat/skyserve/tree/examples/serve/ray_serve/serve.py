"""A Ray Serve app for ray_serve.yaml (written for these tests, in the shape of
SkyPilot's example: one deployment answering GET /)."""

from ray import serve


@serve.deployment
class Hello:
    def __call__(self, request: object) -> str:
        return "hello"


app = Hello.bind()

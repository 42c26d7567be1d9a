"""The Ray Serve docs' FastAPI ingress with class routes, as Ray users write it,
plus a package only its runtime_env.pip installs (``steadywheel``, a wheel the
test builds): it runs in the version's own sealed environment."""

import steadywheel
from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from pydantic import BaseModel
from ray import serve

app = FastAPI()


class Item(BaseModel):
    name: str
    price: float


@serve.deployment
@serve.ingress(app)
class MyFastAPIDeployment:
    def __init__(self) -> None:
        self.greeting = "Hello"

    @app.get("/")
    def root(self) -> str:
        return f"{self.greeting}, world!"

    @app.get("/items/{item_id}")
    def item(self, item_id: int) -> dict:
        return {"item_id": item_id, "wheel": steadywheel.__version__}

    @app.post("/items")
    def create(self, item: Item) -> dict:
        return {"created": item.name}

    @app.get("/stream")
    def stream(self) -> StreamingResponse:
        return StreamingResponse((f"{i}\n" for i in range(3)), media_type="text/plain")

    @app.get("/ray")
    def ray_names(self) -> dict:
        import ray

        try:
            ray.remote  # noqa: B018  (ray.init is provided: it connects nothing)
        except AttributeError as exc:
            return {"error": str(exc)}
        return {"error": None}


fastapi_app = MyFastAPIDeployment.bind()

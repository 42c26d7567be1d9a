"""The Ray Serve docs' FastAPI example, as written for Ray (``from ray import
serve`` untouched): routes on the class and outside it, a path parameter, a
request body, a StreamingResponse, and FastAPI's own docs pages."""

from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from pydantic import BaseModel
from ray import serve

app = FastAPI()


class Item(BaseModel):
    name: str
    price: float


@app.get("/outside")
def outside() -> str:
    return "a route function outside the class"


@serve.deployment
@serve.ingress(app)
class MyFastAPIDeployment:
    def __init__(self) -> None:
        self.greeting = "Hello"

    @app.get("/")
    def root(self) -> str:
        return f"{self.greeting}, world!"

    @app.get("/items/{item_id}")
    async def item(self, item_id: int, q: str = "none") -> dict[str, object]:
        return {"item_id": item_id, "q": q, "greeting": self.greeting}

    @app.post("/items")
    def create(self, item: Item) -> dict[str, object]:
        return {"created": item.name, "price_with_tax": round(item.price * 1.2, 2)}

    @app.get("/stream")
    def stream(self) -> StreamingResponse:
        def numbers():  # type: ignore[no-untyped-def]
            for i in range(5):
                yield f"{i}\n"

        return StreamingResponse(numbers(), media_type="text/plain")


fastapi_app = MyFastAPIDeployment.bind()

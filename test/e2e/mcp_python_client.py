"""The official Python MCP SDK (mcp 2.3.0) against the server, as an agent user runs it.

Driven by test/e2e/mcp-python.test.ts. Arguments: the MCP URL, the way in (`header`: a key in
`Authorization: Bearer`, `link`: the connector link, `oauth`: the SDK's OAuth client), and for
`header` the key. It connects in the SDK's default mode (`auto`: `server/discover` first, the
`initialize` fallback only when refused), lists the tools and runs `generate` on mas/image-demo
with a progress callback.

For OAuth, the browser step is done by the test: this script prints
`{"event": "authorize", "url": ...}` and reads the redirect URL the browser landed on from stdin.

Every HTTP answer to a POST at the MCP URL is recorded with its JSON-RPC method and status, so
the test can check that no 400 sent the client back to the 2025 handshake. The last line of
stdout is `{"event": "result", ...}`.
"""

import asyncio
import json
import sys
from urllib.parse import parse_qs, urlparse

import httpx2
from mcp import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider, TokenStorage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken


def emit(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


class MemoryStorage(TokenStorage):
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


async def main(url: str, way: str, key: str | None) -> None:
    posts: list[dict[str, object]] = []

    async def record(response: httpx2.Response) -> None:
        request = response.request
        if request.method != "POST" or str(request.url) != url:
            return
        try:
            method = json.loads(request.content or b"{}").get("method", "")
        except (ValueError, AttributeError):
            method = ""
        posts.append({"method": method, "status": response.status_code})

    headers: dict[str, str] = {}
    auth = None
    if way == "header":
        headers["Authorization"] = f"Bearer {key}"
    elif way == "oauth":

        async def redirect(authorization_url: str) -> None:
            emit("authorize", url=authorization_url)

        async def callback() -> AuthorizationCodeResult:
            landed = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
            query = parse_qs(urlparse(landed.strip()).query)
            return AuthorizationCodeResult(code=query["code"][0], state=query.get("state", [None])[0], iss=query.get("iss", [None])[0])

        auth = OAuthClientProvider(
            server_url=url,
            client_metadata=OAuthClientMetadata(
                client_name="Python MCP SDK test",
                redirect_uris=["http://127.0.0.1:47199/callback"],
                grant_types=["authorization_code", "refresh_token"],
                response_types=["code"],
                token_endpoint_auth_method="none",
            ),
            storage=MemoryStorage(),
            redirect_handler=redirect,
            callback_handler=callback,
        )

    http = httpx2.AsyncClient(
        headers=headers,
        auth=auth,
        timeout=httpx2.Timeout(30.0, read=300.0),
        event_hooks={"response": [record]},
    )
    progress: list[dict[str, object]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append({"progress": done, "total": total, "message": message})

    async with http:
        async with Client(streamable_http_client(url, http_client=http), client_info=None) as client:
            tools = await client.list_tools()
            result = await client.call_tool(
                "generate",
                {"model": "mas/image-demo", "prompt": "a fox", "settings": {"size": 128, "delay_ms": 1500}, "wait_seconds": 30},
                progress_callback=on_progress,
            )
            emit(
                "result",
                protocol_version=client.protocol_version,
                server=client.server_info.name if client.server_info else None,
                tools=[t.name for t in tools.tools],
                is_error=bool(result.is_error),
                job=result.structured_content,
                progress=progress,
                posts=posts,
            )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None))

"""The Python side of the framework matrix (issue 32), run by `npm run test:frameworks`
(scripts/frameworks.ts) against the real server: each case is what a developer writes with
that framework pointed at this base URL. Prints one line per case; exits 1 if any failed.

Environment: MAS_BASE_URL (…/api/v1), MAS_KEY (a funded key), MAS_MODEL (a text model with
tools and structured outputs: the demo mas/echo).
"""

import json
import os
import sys
import traceback

BASE = os.environ["MAS_BASE_URL"]
KEY = os.environ["MAS_KEY"]
MODEL = os.environ.get("MAS_MODEL", "mas/echo")

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}

CASES = []


def case(fn):
    CASES.append(fn)
    return fn


# ------------------------------------------------------------------ openai (Python SDK)


@case
def openai_chat_with_tools_over_two_turns():
    from openai import OpenAI

    client = OpenAI(base_url=BASE, api_key=KEY, max_retries=0)
    messages = [{"role": "user", "content": "What is the weather in Paris? Use get_weather."}]
    first = client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER_TOOL])
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls", choice.finish_reason
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather"
    args = json.loads(call.function.arguments)
    assert isinstance(args["city"], str) and args["unit"] in ("celsius", "fahrenheit"), args
    assert first.usage.cost_coins > 0  # the extra field survives in model_extra
    messages += [choice.message.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": call.id, "content": "18 degrees and sunny"}]
    second = client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER_TOOL])
    assert second.choices[0].finish_reason == "stop"
    assert "18 degrees and sunny" in second.choices[0].message.content


@case
def openai_chat_streamed_tool_call():
    from openai import OpenAI

    client = OpenAI(base_url=BASE, api_key=KEY, max_retries=0)
    with client.chat.completions.stream(
        model=MODEL, messages=[{"role": "user", "content": "Call get_weather for Oslo."}], tools=[WEATHER_TOOL], stream_options={"include_usage": True}
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    assert final.choices[0].finish_reason == "tool_calls"
    json.loads(final.choices[0].message.tool_calls[0].function.arguments)


@case
def openai_responses_create():
    from openai import OpenAI

    client = OpenAI(base_url=BASE, api_key=KEY, max_retries=0)
    response = client.responses.create(model=MODEL, input="Say hello", instructions="Be brief.")
    assert response.status == "completed", response.status
    assert response.output_text.startswith('You said: "Say hello"'), response.output_text
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens


@case
def openai_responses_streamed():
    from openai import OpenAI

    client = OpenAI(base_url=BASE, api_key=KEY, max_retries=0)
    deltas = []
    with client.responses.stream(model=MODEL, input="Stream please") as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = stream.get_final_response()
    assert final.output_text == "".join(deltas) and final.output_text.startswith('You said: "Stream please"')
    raw = client.responses.create(model=MODEL, input="Stream please", stream=True)
    types = [event.type for event in raw]
    assert types[0] == "response.created" and types[-1] == "response.completed", types


@case
def openai_responses_function_call():
    from openai import OpenAI

    client = OpenAI(base_url=BASE, api_key=KEY, max_retries=0)
    tool = {"type": "function", **WEATHER_TOOL["function"]}
    first = client.responses.create(model=MODEL, input="What is the weather in Rome? Use get_weather.", tools=[tool])
    calls = [item for item in first.output if item.type == "function_call"]
    assert calls and calls[0].name == "get_weather", first.output
    second = client.responses.create(
        model=MODEL,
        tools=[tool],
        input=[
            {"role": "user", "content": "What is the weather in Rome? Use get_weather."},
            {"type": "function_call", "call_id": calls[0].call_id, "name": calls[0].name, "arguments": calls[0].arguments},
            {"type": "function_call_output", "call_id": calls[0].call_id, "output": "22 degrees"},
        ],
    )
    assert "22 degrees" in second.output_text, second.output_text


# ------------------------------------------------------------------ langchain-openai


@case
def langchain_bind_tools():
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"It is sunny in {city}"

    llm = ChatOpenAI(model=MODEL, base_url=BASE, api_key=KEY, max_retries=0).bind_tools([get_weather])
    messages = [HumanMessage("What is the weather in Lima? Use get_weather.")]
    ai = llm.invoke(messages)
    assert ai.tool_calls and ai.tool_calls[0]["name"] == "get_weather", ai
    messages += [ai, ToolMessage(get_weather.invoke(ai.tool_calls[0]["args"]), tool_call_id=ai.tool_calls[0]["id"])]
    final = llm.invoke(messages)
    assert "It is sunny in" in final.content, final.content


@case
def langchain_with_structured_output():
    from pydantic import BaseModel
    from langchain_openai import ChatOpenAI

    class City(BaseModel):
        name: str
        population: int

    llm = ChatOpenAI(model=MODEL, base_url=BASE, api_key=KEY, max_retries=0)
    for method in ("json_schema", "function_calling"):
        city = llm.with_structured_output(City, method=method).invoke("Describe a city")
        assert isinstance(city, City) and isinstance(city.population, int), (method, city)


# ------------------------------------------------------------------ LiteLLM as a client


@case
def litellm_completion_with_tools():
    import litellm

    response = litellm.completion(
        model=f"openai/{MODEL}",
        api_base=BASE,
        api_key=KEY,
        messages=[{"role": "user", "content": "Weather in Cairo? Use get_weather."}],
        tools=[WEATHER_TOOL],
    )
    call = response.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather"
    json.loads(call.function.arguments)


# ------------------------------------------------------------------ LlamaIndex


@case
def llamaindex_structured_predict():
    from pydantic import BaseModel
    from llama_index.core.prompts import PromptTemplate
    from llama_index.llms.openai_like import OpenAILike

    class Song(BaseModel):
        title: str
        length_seconds: int

    llm = OpenAILike(model=MODEL, api_base=BASE, api_key=KEY, is_chat_model=True, is_function_calling_model=True, max_retries=0)
    song = llm.structured_predict(Song, PromptTemplate("Write a song about {topic}"), topic="the sea")
    assert isinstance(song, Song) and isinstance(song.length_seconds, int), song


def main() -> int:
    only = set(sys.argv[1:])
    failed = 0
    for fn in CASES:
        if only and fn.__name__ not in only:
            continue
        try:
            fn()
            print(f"PASS {fn.__name__}", flush=True)
        except Exception:  # noqa: BLE001 - every failure is reported, then the run fails
            failed += 1
            print(f"FAIL {fn.__name__}\n{traceback.format_exc()}", flush=True)
    print(f"{len(CASES) - failed if not only else len(only) - failed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

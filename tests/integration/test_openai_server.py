"""pulseinfer-server (server/) against the PyPI `openai` client and curl, on loopback over
SmolLM2: chat and completions, streamed and whole, stop strings, a stream the client closes (its
request is cancelled), and 64 concurrent streams with no error (their time to first token
printed). The server is built here from server/ against $PULSE_BUILD_DIR's library."""
import os
import pathlib
import socket
import statistics
import subprocess
import threading
import time
import urllib.request

import pytest

openai = pytest.importorskip("openai", reason="scripts/setup installs the openai package")

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("PULSE_BUILD_DIR", REPO / "build")).resolve()
MODEL = REPO / ".cache" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    binary = tmp_path_factory.mktemp("server") / "pulseinfer-server"
    env = dict(os.environ, GOPROXY="off", GOFLAGS="-mod=mod",
               CGO_LDFLAGS=f"-L{BUILD / 'lib'} -Wl,-rpath,{BUILD / 'lib'}")
    env.setdefault("GOCACHE", str(BUILD / "go-cache"))
    subprocess.run(["go", "build", "-o", str(binary), "."], cwd=REPO / "server", env=env,
                   check=True, timeout=600)
    port = free_port()
    process = subprocess.Popen([str(binary), "--model", str(MODEL), "--addr", f"127.0.0.1:{port}",
                                "--max-concurrent", "80"], stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            get(url + "/health")
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"the server did not start: {process.stderr.read()}")
            time.sleep(0.1)
    yield url
    process.terminate()
    process.wait(timeout=30)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server + "/v1", api_key="unused", max_retries=0)


def running(server: str) -> int:
    for line in get(server + "/metrics").splitlines():
        if line.startswith("pulseinfer_requests_running "):
            return int(float(line.split()[1]))
    raise AssertionError("no pulseinfer_requests_running in /metrics")


def test_models_lists_the_model(client):
    assert [model.id for model in client.models.list()] == ["SmolLM2-135M-Instruct.Q4_1"]


def test_chat_whole_and_streamed_give_the_same_answer(client):
    whole = client.chat.completions.create(model="m", messages=QUESTION, temperature=0,
                                           max_tokens=24)
    answer = whole.choices[0].message.content
    assert whole.choices[0].message.role == "assistant"
    assert "Paris" in answer
    assert whole.choices[0].finish_reason in ("stop", "length")
    assert whole.usage.completion_tokens > 0 and whole.usage.prompt_tokens > 0
    pieces = [chunk.choices[0].delta.content or ""
              for chunk in client.chat.completions.create(model="m", messages=QUESTION,
                                                          temperature=0, max_tokens=24,
                                                          stream=True)]
    assert "".join(pieces) == answer


def test_completion_stops_at_a_stop_string(client):
    prompt = "1, 2, 3, 4,"
    free = client.completions.create(model="m", prompt=prompt, temperature=0, max_tokens=16)
    text = free.choices[0].text
    assert " 6" in text, text
    stopped = client.completions.create(model="m", prompt=prompt, temperature=0, max_tokens=16,
                                        stop=[" 6"])
    assert stopped.choices[0].text == text[:text.index(" 6")]
    assert stopped.choices[0].finish_reason == "stop"
    streamed = "".join(chunk.choices[0].text for chunk in client.completions.create(
        model="m", prompt=prompt, temperature=0, max_tokens=16, stop=[" 6"], stream=True))
    assert streamed == stopped.choices[0].text


def test_a_closed_stream_cancels_its_request(client, server):
    stream = client.completions.create(model="m", prompt="Once upon a time", max_tokens=2000,
                                       extra_body={"ignore_eos": True}, stream=True)
    for received, _ in enumerate(stream):
        if received == 2:
            break
    stream.close()
    deadline = time.monotonic() + 10
    while running(server) != 0:
        assert time.monotonic() < deadline, "the request still runs 10 s after its client left"
        time.sleep(0.05)


def test_curl_streams_server_sent_events(server):
    out = subprocess.run(["curl", "-sN", server + "/v1/chat/completions", "-H",
                          "Content-Type: application/json", "-d",
                          '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, '
                          '"stream": true}'], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("data: {") and out.stdout.rstrip().endswith("data: [DONE]")


def test_bad_requests_are_openai_errors(client):
    with pytest.raises(openai.BadRequestError) as error:
        client.completions.create(model="m", prompt="x", max_tokens=4, n=2)
    assert "n must be 1" in str(error.value)


def test_64_concurrent_streams_complete_without_error(client):
    first_token, errors, texts = [], [], []
    lock = threading.Lock()

    def one(i: int):
        try:
            start = time.monotonic()
            first = None
            text = ""
            for chunk in client.completions.create(model="m", prompt=f"Story {i}: once",
                                                   max_tokens=12, temperature=0.8, seed=i,
                                                   extra_body={"ignore_eos": True},
                                                   stream=True):
                if first is None:
                    first = time.monotonic() - start
                text += chunk.choices[0].text
            with lock:
                first_token.append(first)
                texts.append(text)
        except Exception as e:  # every failure is reported below
            with lock:
                errors.append(repr(e))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(64)]
    start = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    seconds = time.monotonic() - start
    assert errors == []
    assert len(texts) == 64 and all(texts)
    first_token.sort()
    p99 = first_token[min(len(first_token) - 1, int(0.99 * len(first_token)))]
    print(f"64 concurrent streams in {seconds:.1f} s: time to first token p50 "
          f"{statistics.median(first_token) * 1e3:.0f} ms, p99 {p99 * 1e3:.0f} ms")

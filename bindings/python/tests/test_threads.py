"""Threads: two generating on one engine, the GIL released during long calls, and an engine
closed while another thread steps it."""
import threading
import time

import pulseinfer
from pulseinfer import SamplingParams

PROMPTS = ["Once upon a time", "The quick brown fox jumps over"]
SAMPLING = SamplingParams(temperature=0, max_tokens=12)


def test_two_threads_generate_on_one_engine(model, engine):
    alone = [engine.generate(prompt, SAMPLING).token_ids() for prompt in PROMPTS]
    results = {}

    def generate(index: int) -> None:
        generation = engine.generate(PROMPTS[index], SAMPLING)
        results[index] = (generation.token_ids(), generation.text())

    threads = [threading.Thread(target=generate, args=(index,)) for index in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for index, (ids, text) in results.items():
        assert ids == alone[index]
        assert text == model.detokenize(ids)
    assert len(results) == 2


def test_model_load_releases_the_gil(smollm2_path):
    loaded = []
    loader = threading.Thread(target=lambda: loaded.append(
        pulseinfer.Model(smollm2_path, pulseinfer.ModelParams(threads=1))))
    longest_pause = 0.0
    start = last = time.monotonic()
    loader.start()
    while loader.is_alive():
        now = time.monotonic()
        longest_pause, last = max(longest_pause, now - last), now
    loaded[0].close()
    assert longest_pause < (last - start) / 2  # this thread ran during the load


def test_closing_the_engine_while_another_thread_steps(engine):
    generation = engine.generate(PROMPTS[0], SamplingParams(temperature=0, max_tokens=64))
    next(generation)
    ended = []

    def read_on() -> None:
        try:
            ended.append(len(generation.token_ids()))
        except ValueError as error:
            ended.append(error)

    reader = threading.Thread(target=read_on)
    reader.start()
    engine.close()  # waits for a step in flight
    reader.join()
    assert ended and (isinstance(ended[0], ValueError) or ended[0] == 64)

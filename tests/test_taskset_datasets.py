"""Tasksets the datasets library opens: a saved dataset folder, parquet, CSV and JSON lines
files, reached from env settings and the command (``--set env.taskset...``) and from an env
file; column mapping, split, limit, seeded shuffle; what is missing said in one line."""

from __future__ import annotations

import http.server
import json
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from interplay import InterplayError, cli
from interplay.run import results
from interplay.testing import ScriptedModel, run_interplay
from interplay.values.taskset import DatasetTaskset, load

datasets = pytest.importorskip("datasets")

QUESTIONS = [{"question": f"What is {i} + {i}?", "label": str(2 * i), "topic": "sums",
              "difficulty": i % 3} for i in range(8)]


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    """A dataset folder as save_to_disk writes it, with two splits."""
    folder = tmp_path / "sums"
    datasets.DatasetDict({
        "train": datasets.Dataset.from_list(QUESTIONS[:5]),
        "test": datasets.Dataset.from_list(QUESTIONS[5:])}).save_to_disk(str(folder))
    return folder


def test_an_eval_runs_a_saved_dataset_named_on_the_command_line(saved: Path,
                                                               tmp_path: Path) -> None:
    out = tmp_path / "run"
    with ScriptedModel(lambda r: f"It is {r.last_user_text().split()[2]}") as model:
        code = cli.main(["eval", "echo", "--base-url", model.base_url, "-o", str(out),
                         "--quiet", "--no-report",
                         "--set", f"env.taskset.dataset={saved}",
                         "--set", "env.taskset.split=train",
                         "--set", "env.taskset.prompt=question",
                         "--set", "env.taskset.answer=label"])
    assert code == 0
    episodes = sorted(results.iter_episodes(out / "episodes.jsonl"), key=results.pair_of)
    assert [e["task"]["idx"] for e in episodes] == [0, 1, 2, 3, 4]
    first = episodes[0]["task"]
    assert first["prompt"] == "What is 0 + 0?" and first["answer"] == "0"
    assert first["info"] == {"topic": "sums", "difficulty": 0}
    # The settings are the run's config, so a resume with other ones is refused.
    config = json.loads((out / "config.json").read_text())["config"]
    assert config["env"]["taskset"]["dataset"] == str(saved)


def test_columns_split_limit_and_a_seeded_shuffle(saved: Path) -> None:
    spec = DatasetTaskset(dataset=str(saved), split="train", prompt="question",
                          answer="label", info=["topic"])
    tasks = spec.load()
    assert [t.prompt for t in tasks] == [q["question"] for q in QUESTIONS[:5]]
    assert all(t.info == {"topic": "sums"} and t.system_prompt is None for t in tasks)
    shuffled = DatasetTaskset(dataset=str(saved), split="train", prompt="question",
                              shuffle=True, seed=3, limit=3).load()
    again = DatasetTaskset(dataset=str(saved), split="train", prompt="question",
                           shuffle=True, seed=3, limit=3).load()
    other = DatasetTaskset(dataset=str(saved), split="train", prompt="question",
                           shuffle=True, seed=4, limit=3).load()
    assert [t.idx for t in shuffled] == [t.idx for t in again] != [t.idx for t in other]
    assert len(shuffled) == 3
    # A row keeps its idx, shuffled or not: the idx is its number in the split.
    assert all(t.prompt == QUESTIONS[t.idx]["question"] for t in shuffled)


def test_data_files_and_message_prompts(tmp_path: Path) -> None:
    parquet = tmp_path / "tasks.parquet"
    datasets.Dataset.from_list([{"prompt": "Say hi", "answer": "hi"}]).to_parquet(str(parquet))
    (task,) = load(str(parquet))
    assert task.prompt == "Say hi" and task.answer == "hi" and task.idx == 0
    csv = tmp_path / "tasks.csv"
    csv.write_text("prompt,answer,system_prompt\nName a fruit,apple,Be brief.\n")
    (task,) = load(DatasetTaskset(dataset=str(csv)))
    assert task.system_prompt == "Be brief." and task.answer == "apple"
    chats = tmp_path / "chats.json"
    chats.write_text(json.dumps({"prompt": [{"role": "system", "content": "Be kind."},
                                            {"role": "user", "content": "Hello"}],
                                 "answer": "hello"}) + "\n")
    (task,) = load(DatasetTaskset(dataset=str(chats)))
    assert [m.role for m in task.messages()] == ["system", "user"]


def test_an_env_file_names_a_dataset_relative_to_itself(saved: Path, tmp_path: Path) -> None:
    from interplay.run.loader import env_from_toml

    env_file = tmp_path / "sums.toml"
    env_file.write_text('name = "sums"\n[taskset]\ndataset = "sums"\nsplit = "test"\n'
                        'prompt = "question"\n[[steps]]\nkind = "one_shot"\n')
    tasks = list(env_from_toml(env_file)().tasks())
    assert [t.idx for t in tasks] == [0, 1, 2] and tasks[0].prompt == "What is 5 + 5?"


@pytest.mark.parametrize(("spec", "says"), [
    ({"split": None}, "has splits train, test; choose one with env.taskset.split"),
    ({"split": "dev"}, "has no split 'dev'; its splits: train, test"),
    ({"split": "test"}, "no column 'prompt' for the prompt; name its column with "
                        "env.taskset.prompt (columns: question, label, topic, difficulty)"),
    ({"split": "test", "prompt": "question", "answer": "answer"}, "no column 'answer'"),
    ({"split": "test", "prompt": "question", "info": ["nope"]}, "no column 'nope' for info"),
])
def test_what_does_not_fit_is_one_line(saved: Path, spec: dict[str, object],
                                       says: str) -> None:
    with pytest.raises(InterplayError) as caught:
        DatasetTaskset(dataset=str(saved), **spec).load()  # type: ignore[arg-type]
    assert says in caught.value.message and "\n" not in caught.value.message


def test_missing_files_and_a_missing_library_are_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InterplayError, match="does not exist; name a JSONL file"):
        load(str(tmp_path / "nowhere"))
    with pytest.raises(InterplayError, match="not a data file the datasets library reads"):
        (tmp_path / "tasks.xlsx").write_bytes(b"x")
        load(DatasetTaskset(dataset=str(tmp_path / "tasks.xlsx")))
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(InterplayError, match=r"pip install 'interplay\[datasets\]'"):
        load(DatasetTaskset(dataset=str(tmp_path)))


@pytest.mark.slow
def test_a_hub_dataset_offline_says_where_to_put_it(tmp_path: Path) -> None:
    env = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_HOME": str(tmp_path / "hf")}
    proc = run_interplay("eval", "echo", "-o", str(tmp_path / "run"), "--quiet",
                         "--base-url", "http://127.0.0.1:9/v1",
                         "--set", "env.taskset.dataset=someone/no-such-sums", env=env)
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip()
    assert "\n" not in line and "offline" in line and "save_to_disk" in line
    assert "env.taskset.dataset=DIR" in line


class _NotFound(http.server.BaseHTTPRequestHandler):
    """A Hub that has no dataset: 404 to everything, as the Hub answers an unknown repo."""

    def answer(self) -> None:
        body = b'{"error": "Repository not found"}'
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Error-Code", "RepoNotFound")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_HEAD = answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hub(request: pytest.FixtureRequest) -> Iterator[str]:
    """HF_ENDPOINT for a Hub that refuses connections (nothing listens on its port), takes
    them and never answers (a listening socket nobody accepts on), or answers 404."""
    if request.param == "answers":
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotFound)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield f"http://127.0.0.1:{server.server_address[1]}"
        server.shutdown()
        server.server_close()
        return
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    if request.param == "refuses":
        sock.close()
        yield f"http://127.0.0.1:{port}"
        return
    sock.listen(8)
    yield f"http://127.0.0.1:{port}"
    sock.close()


@pytest.mark.slow
@pytest.mark.parametrize(("hub", "says"), [
    ("refuses", "nor in this machine's datasets cache, and the Hub cannot be reached (offline)"),
    ("never_answers", "the Hub cannot be reached (offline)"),
    ("answers", "nor a dataset the Hub has (Dataset 'someone/no-such-sums' doesn't exist"),
], indirect=["hub"])
def test_a_hub_dataset_fails_at_once_when_the_hub_cannot_be_reached(tmp_path: Path, hub: str,
                                                                     says: str) -> None:
    """No offline setting, and no route to the Hub: the one line says offline and where to
    put the dataset, without the library's retries first (23 s of them where the Hub's name
    does not resolve, minutes where nothing answers). A Hub that answers is asked as usual."""
    env = {"HF_ENDPOINT": hub, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "",
           "HF_DATASETS_OFFLINE": "", "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
    proc = run_interplay("eval", "echo", "-o", str(tmp_path / "run"), "--quiet",
                         "--base-url", "http://127.0.0.1:9/v1",
                         "--set", "env.taskset.dataset=someone/no-such-sums", env=env)
    assert proc.returncode == 2, proc.stderr
    assert "Retry" not in proc.stderr, proc.stderr  # the library's retry warnings
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("interplay: error: taskset 'someone/no-such-sums' is not a "
                                  "file or folder here")
    assert says in proc.stderr

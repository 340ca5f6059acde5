"""The sample book from its first line of story, as a source folder for the LLM benchmarks."""

from __future__ import annotations

from pathlib import Path

SAMPLE = Path(__file__).resolve().parents[1] / "sample" / "a_christmas_carol.txt"


def story_words() -> list[str]:
    text = SAMPLE.read_text(encoding="utf-8-sig")
    return text[text.index("Marley was dead, to begin with"):].split()


def write_opening(folder: Path, name: str, words: int | None) -> Path:
    """`folder/name` holding the first `words` words of the story (None: all of it); returns `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(" ".join(story_words()[:words]))
    return folder

"""The files a published version pins: every entry of a manifest's `vector_indexes` (vector
indexes, and the search files beside them) as the list of files it consists of. Publish hashes
them, `graphwright check` verifies them, retention keeps them."""

from __future__ import annotations

SEARCH_PREFIXES = ("lexical/", "graph/")  # lexical indexes; synonym edges and the passage graph


def is_search_file(relative: str) -> bool:
    return relative.startswith(SEARCH_PREFIXES)


def files_of(files, relative: str) -> list[str]:
    """The files of the manifest entry `relative`. Optional parts that do not exist are left out;
    a missing required part is listed, so that a check names it."""
    if relative.startswith("graph/passage-"):
        from graphwright.stages.embed.passage_graph import ARRAYS

        folder = relative.rsplit("/", 1)[0]
        return [relative] + [f"{folder}/{name}.npy" for name in ARRAYS]
    if relative.startswith("graph/"):  # synonym edges, and what they cover when there is one
        from graphwright.stages.embed.synonyms import covered_path

        return [relative] + [p for p in (covered_path(relative),) if files.exists(p)]
    if relative.startswith("lexical/") and files.exists(relative):
        from graphwright.engines.lexical import files_in_use

        return sorted(files_in_use(files, [relative]))  # the version file, its item list, its segments
    from graphwright.engines.vectors.overlay import index_files

    return index_files(files, relative)  # a vector index: with an overlay, its base's files too

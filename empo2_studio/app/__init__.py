"""The studio: a local Gradio app over the env, policy, memory and trainer APIs (issue 6).

    from empo2_studio.app import launch
    launch()                                   # http://127.0.0.1:7860, embedded model, sessions/studio
    launch(env="trap", policy="tiny", embedder="hash", port=0)   # fast, for tests

`build_app(studio)` returns the `gr.Blocks`; `launch(...)` builds the `Studio` (shared model, tip
stores, trainers, job registry), starts preparing the model in the background, and serves the page.
The page opens on the Lesson tab of a trap session. Tabs, one module each: Lesson (trap → tips →
distill → naive succeeds), Episodes (naive vs memory side by side), Tips (curation), Train (+ Distill
now), Race (EMPO² vs GRPO), Adapt (OOD, frozen weights), Sessions (list, open/resume, compare,
export). `app.api` is the named, scriptable API (docs/api.md).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from empo2_studio.app.studio import DEFAULT_RUN_ID, Studio

ASSETS_CSS = Path(__file__).resolve().parents[2] / "assets" / "app.css"


def build_app(studio: Studio) -> Any:
    """The studio's `gr.Blocks`, bound to `studio`."""
    from empo2_studio.app.layout import build_blocks

    return build_blocks(studio)


def app_css() -> str:
    """The page's CSS: the renderer's classes plus `assets/app.css` when present."""
    from empo2_studio.app.render import CSS

    extra = ASSETS_CSS.read_text(encoding="utf-8") if ASSETS_CSS.is_file() else ""
    return CSS + extra


SHARED_MODULES = ("narwhals.stable.v1", "narwhals.stable.v2", "plotly.graph_objects")
"""Modules both the page (plotly → narwhals.stable.v1) and the model preparation thread
(sentence-transformers → scikit-learn → narwhals.stable.v2) import lazily."""


def import_shared_modules() -> None:
    """Import `SHARED_MODULES` on the main thread before the model preparation thread starts: two
    threads importing narwhals' submodules at once deadlock in Python's import lock
    (`_DeadlockError: deadlock detected by _ModuleLock('narwhals.stable.v2')`), which killed the studio
    at start."""
    import importlib

    for name in SHARED_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:  # an older plotly without narwhals: nothing to share
            pass


def launch(
    host: str = "127.0.0.1",
    port: int = 7860,
    sessions_dir: str | os.PathLike[str] | None = None,
    env: str | None = None,
    share: bool = False,
    *,
    run_id: str = DEFAULT_RUN_ID,
    policy: str | Any | None = None,
    embedder: str | Any | None = None,
    config: Any | None = None,
    block: bool = True,
    quiet: bool = False,
) -> tuple[Any, Studio]:
    """Serve the studio on http://host:port (never a public link unless `share=True`).

    Args:
        sessions_dir: sessions root (default `$EMPO2_SESSIONS_DIR` or ./sessions).
        env: env of the default session ("trap" / "scienceworld"; default trap, see `Studio`).
        run_id: the session created or reopened at start.
        policy, embedder: "tiny"/"hash" for fast tests (see `Studio`); default the real ones.
        config: RunConfig of the default session when it is created (None = the studio default).
        block: wait until interrupted (False returns at once; call `demo.close()` to stop).
    Returns:
        (demo, studio); `demo.local_url` is the page's address.
    """
    from empo2_studio.sessions import default_sessions_root

    studio = Studio(sessions_dir or default_sessions_root(), env=env, policy=policy, embedder=embedder, run_id=run_id,
                    config=config)
    import_shared_modules()
    demo = build_app(studio)
    studio.prepare_model()
    demo.queue(default_concurrency_limit=4)
    demo.launch(
        server_name=host, server_port=port or None, share=share, prevent_thread_lock=True, quiet=quiet,
        css=app_css(), show_error=False, inbrowser=False,
    )  # fmt: skip
    if block:
        try:
            demo.block_thread()
        finally:
            studio.close()
    return demo, studio


__all__ = ["Studio", "build_app", "launch"]

"""View models: engine records in, plain frames and dicts out (pure, no Streamlit, no I/O).

Pages ask `dashboard.data` for records, shape them here, and hand the result to
`dashboard.charts` or a Streamlit element. Everything here is tested with hand-made records.

One module per page it serves (a package of one module per tab for the session page), so none
grows past what a reader can hold:

- `common`: status words and colours, times, compact JSON, foreign text made safe (`plain`,
  `literal`, `plot_text`, `escape_text`); every other module builds on it.
- `fleet`: the sessions table, KPIs, the "needs you" band, the loops-over-time charts.
- `session/`: the session page, one module per part of it: `header` (loop cost, watch-only,
  the operator's label), then one per tab: `timeline`, `why_flagged` (evidence, what each
  rule saw), `snapshots`, `messages`, `memory`, `budget`.
- `dialogs`: rollback and notice dialogs, bulk rollback previews and results.
- `compensations`, `audit`, `quarantine`: the pages of the same names.

Every public name is re-exported here, so pages and tests keep writing `views.sessions_frame`.
"""

from __future__ import annotations

from dashboard.views.audit import (
    AUDIT_ACTIONS,
    AUDIT_COLUMNS,
    FORMULA_STARTS,
    audit_csv,
    audit_frame,
    audit_summary,
    inert_cell,
)
from dashboard.views.common import (
    ARGS_CHARS,
    STATUS_COLORS,
    STATUS_LABELS,
    STATUS_ORDER,
    STUCK_AFTER_S,
    WORD_JOINER,
    counted,
    duration_text,
    escape_text,
    literal,
    loops_text,
    plain,
    plot_text,
    rollbacks_text,
    session_link,
    short_json,
    status_label,
    status_markdown,
    store_label,
    when,
)
from dashboard.views.compensations import (
    COMPENSATION_COLORS,
    COMPENSATION_COLUMNS,
    COMPENSATION_REASONS,
    OPEN_COMPENSATIONS,
    compensation_outcomes_text,
    compensations_frame,
    handlers_without_process,
    next_try_text,
)
from dashboard.views.dialogs import (
    BULK_PREVIEW_COLUMNS,
    BULK_RESULT_COLUMNS,
    DECIDE_KEY,
    DIALOG_CSS,
    NOTICE_CHOICES,
    PRESET_REASONS,
    BulkTotals,
    bulk_preview_frame,
    bulk_result_frame,
    bulk_totals,
    default_notice_choice,
    notice_text,
    notices_leaving,
    preview_frames,
)
from dashboard.views.fleet import (
    AUTO_BUCKETS,
    AUTO_LOOKBACK_S,
    AUTO_LOOKBACKS,
    AUTO_MIN_SPAN_S,
    AUTO_WINDOW,
    BLANK_COLUMNS,
    DEFAULT_SORT,
    EPISODE_COLUMNS,
    FIXED_WINDOWS,
    MAX_BARS,
    MIN_BARS,
    SESSION_COLUMNS,
    SORTS,
    TOP_SERIES,
    WINDOW_CHOICES,
    ChartWindow,
    Kpi,
    NeedsYou,
    auto_episodes,
    blank_missing,
    bucket_seconds,
    bucket_text,
    facets,
    fit_bucket,
    fit_window,
    kpis,
    local_times,
    loop_buckets,
    loop_episodes_frame,
    loop_steps,
    needs_you,
    needs_you_heading,
    select_sessions,
    sessions_frame,
    top_series,
)
from dashboard.views.quarantine import (
    QUARANTINE_COLUMNS,
    quarantine_label,
    quarantines_frame,
    scope_text,
    until_text,
)
from dashboard.views.session.budget import (
    BUDGET_COLUMNS,
    BUDGET_PARTS,
    BudgetPart,
    budget_history,
    budget_parts,
    current_budget,
)
from dashboard.views.session.header import (
    TABS_CSS,
    LoopCost,
    loop_cost,
    loop_cost_line,
)
from dashboard.views.session.memory import (
    DECAY_POINTS,
    decay_done,
    decay_frames,
    decay_windows,
    memory_label,
    memory_log_frame,
    memory_table,
)
from dashboard.views.session.messages import (
    MESSAGES_CSS,
    USER_VIEW_CSS,
    MessageView,
    NoticeSeen,
    content_text,
    last_notice,
    messages_html,
    messages_view,
    user_view,
    user_view_html,
)
from dashboard.views.session.snapshots import (
    node_label,
    rollback_choices,
    snapshot_caption,
    tree_layout,
)
from dashboard.views.session.timeline import (
    AGENT_LANE,
    LANE_ARGS_CHARS,
    MAX_LANES,
    OTHER_LANE,
    clock_ticks,
    lane_labels,
    lane_order,
    loop_windows,
    rollback_markers,
    steps_shown,
    timeline_frame,
)
from dashboard.views.session.why_flagged import (
    arg_diffs,
    evidence_frame,
    near_duplicate_groups,
    step_list,
)

__all__ = [
    "ARGS_CHARS", "STATUS_ORDER", "STATUS_LABELS", "STATUS_COLORS", "status_label",
    "status_markdown", "when", "short_json", "session_link", "WORD_JOINER", "plain", "literal",
    "plot_text", "escape_text", "store_label", "duration_text", "counted", "loops_text",
    "rollbacks_text", "STUCK_AFTER_S",
    "EPISODE_COLUMNS", "loop_episodes_frame", "SESSION_COLUMNS", "DEFAULT_SORT", "SORTS",
    "local_times", "sessions_frame", "select_sessions", "BLANK_COLUMNS", "blank_missing", "facets",
    "Kpi", "kpis", "loop_steps", "NeedsYou", "needs_you", "needs_you_heading", "AUTO_WINDOW",
    "FIXED_WINDOWS", "WINDOW_CHOICES", "AUTO_LOOKBACKS", "AUTO_LOOKBACK_S", "AUTO_MIN_SPAN_S",
    "AUTO_BUCKETS", "MIN_BARS", "MAX_BARS", "ChartWindow", "bucket_text", "fit_bucket",
    "auto_episodes", "fit_window", "bucket_seconds", "loop_buckets", "TOP_SERIES", "top_series",
    "MAX_LANES", "OTHER_LANE", "AGENT_LANE", "LoopCost", "loop_cost", "loop_cost_line",
    "LANE_ARGS_CHARS", "lane_labels", "timeline_frame", "clock_ticks", "lane_order",
    "loop_windows", "rollback_markers", "steps_shown", "step_list", "evidence_frame", "arg_diffs",
    "near_duplicate_groups", "tree_layout", "node_label", "rollback_choices", "snapshot_caption",
    "MessageView", "content_text", "messages_view", "user_view", "user_view_html", "TABS_CSS",
    "USER_VIEW_CSS",
    "NoticeSeen", "last_notice", "messages_html", "MESSAGES_CSS", "BUDGET_PARTS", "BudgetPart",
    "BUDGET_COLUMNS", "memory_label", "memory_table", "DECAY_POINTS", "decay_windows",
    "decay_done", "decay_frames",
    "memory_log_frame", "budget_history", "current_budget", "budget_parts", "notices_leaving",
    "PRESET_REASONS", "DECIDE_KEY", "DIALOG_CSS", "NOTICE_CHOICES", "default_notice_choice",
    "notice_text", "preview_frames", "BULK_PREVIEW_COLUMNS", "BulkTotals", "bulk_totals",
    "bulk_preview_frame", "BULK_RESULT_COLUMNS", "bulk_result_frame", "COMPENSATION_COLUMNS",
    "COMPENSATION_COLORS", "OPEN_COMPENSATIONS", "COMPENSATION_REASONS", "compensations_frame",
    "next_try_text", "handlers_without_process", "compensation_outcomes_text", "AUDIT_COLUMNS",
    "AUDIT_ACTIONS",
    "audit_summary", "audit_frame", "FORMULA_STARTS", "inert_cell", "audit_csv", "scope_text",
    "until_text", "QUARANTINE_COLUMNS", "quarantines_frame", "quarantine_label",
]

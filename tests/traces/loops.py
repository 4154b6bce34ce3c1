"""Looping traces, modeled on incidents seen in agent runtimes (labels: see `model`)."""

from __future__ import annotations

from .model import FLAG, START, err, ok, overflowed, rid, say, trace, ts

RECEIPT = "uploads/receipt_0193.jpg"
BOX = [820, 1400, 1180, 1330]
SLICE_ERROR = "invalid slice: y2 (1330) must be greater than y1 (1400)"


def _coding_prefix() -> list:
    """Fifteen ordinary steps of a coding agent before things go wrong."""
    return [
        say("I'll start by looking at the repository layout."),
        ok("list_dir", {"path": "."}, ["src", "tests", "README.md", "pyproject.toml"]),
        ok("list_dir", {"path": "src"}, ["app.py", "crop.py", "io.py"]),
        ok("read_file", {"path": "src/crop.py"}, "def crop(img, box):\n    x1, y1, x2, y2 = box\n"),
        ok("read_file", {"path": "src/io.py"}, "def load(path):\n    ...\n"),
        ok("grep", {"pattern": "crop(", "path": "src"}, ["src/app.py:14", "src/crop.py:1"]),
        ok("read_file", {"path": "src/app.py"}, "from crop import crop\n..."),
        say("The crop box order looks suspicious; let me check the tests."),
        ok("read_file", {"path": "tests/test_crop.py"}, "def test_bounds():\n    ..."),
        ok("run_tests", {"cmd": "pytest -q"}, {"failed": 1, "passed": 30}),
        ok(
            "edit_file",
            {
                "path": "src/crop.py",
                "old": "x1, y1, x2, y2 = box",
                "new": "x1, y1, x2, y2 = normalize(box)",
            },
            "Edited src/crop.py",
        ),
        ok("run_tests", {"cmd": "pytest -q"}, {"failed": 0, "passed": 31}),
        ok("git_status", {}, " M src/crop.py"),
        ok("load_image", {"path": RECEIPT}, {"width": 1200, "height": 1600}),
        say("Now let me crop the total from the sample receipt."),
    ]


LOOP_TRACES = [
    # --- image_crop "invalid slice" with the same coordinates ---------------------------------
    trace(
        "crop_same_coords",
        "image_crop fails with 'invalid slice' and the agent re-sends the same box forty times",
        ok("load_image", {"path": RECEIPT}, {"width": 1200, "height": 1600, "format": "JPEG"}),
        say("I'll crop the area with the total amount."),
        START,
        err("image_crop", {"path": RECEIPT, "box": BOX}, SLICE_ERROR),
        say("Let me try cropping again."),
        err("image_crop", {"path": RECEIPT, "box": BOX}, SLICE_ERROR),
        say("Retrying the crop."),
        FLAG,
        err("image_crop", {"path": RECEIPT, "box": BOX}, SLICE_ERROR),
        [
            [
                say("Trying the crop once more."),
                err("image_crop", {"path": RECEIPT, "box": BOX}, SLICE_ERROR),
            ]
            for _ in range(37)
        ],
        rule="exact_repeat",
    ),
    trace(
        "crop_same_coords_request_ids",
        "the runtime stamps every crop with a fresh request id and time; the error echoes the id",
        ok("load_image", {"image_id": "img_77"}, {"width": 640, "height": 480}),
        START,
        [
            err(
                "image_crop",
                {
                    "image_id": "img_77",
                    "x": 600,
                    "y": 10,
                    "w": 80,
                    "h": 40,
                    "request_id": rid(i),
                    "timestamp": ts(i),
                },
                f"invalid slice: x+w exceeds width 640 (request {rid(i)})",
            )
            for i in range(2)
        ],
        FLAG,
        [
            err(
                "image_crop",
                {
                    "image_id": "img_77",
                    "x": 600,
                    "y": 10,
                    "w": 80,
                    "h": 40,
                    "request_id": rid(i),
                    "timestamp": ts(i),
                },
                f"invalid slice: x+w exceeds width 640 (request {rid(i)})",
            )
            for i in range(2, 12)
        ],
        rule="exact_repeat",
    ),
    trace(
        "crop_same_coords_spelled_differently",
        "the same crop retried with the path and region written slightly differently",
        ok("list_dir", {"path": "uploads"}, ["scan.png", "scan_2.png"]),
        START,
        err(
            "image_crop",
            {"path": "./uploads/scan.png", "region": "10 20 300 200"},
            "invalid slice: empty region",
        ),
        err(
            "image_crop",
            {"path": "uploads//scan.png", "region": "10  20 300 200"},
            "invalid slice: empty region",
        ),
        FLAG,
        err(
            "image_crop",
            {"path": "uploads/scan.png", "region": " 10 20 300 200 "},
            "invalid slice: empty region",
        ),
        err(
            "image_crop",
            {"path": "uploads/scan.png/", "region": "10 20 300 200"},
            "invalid slice: empty region",
        ),
        err(
            "image_crop",
            {"path": "uploads\\scan.png", "region": "10 20 300 200"},
            "invalid slice: empty region",
        ),
        rule="exact_repeat",
    ),
    trace(
        "crop_same_coords_new_explanation_each_time",
        "every retry carries a freshly worded 'explanation' argument; the call itself is the same",
        ok("load_image", {"path": RECEIPT}, {"width": 1200, "height": 1600}),
        START,
        err(
            "image_crop",
            {
                "path": RECEIPT,
                "box": BOX,
                "explanation": "Crop the total so I can read the amount.",
            },
            SLICE_ERROR,
        ),
        err(
            "image_crop",
            {"path": RECEIPT, "box": BOX, "explanation": "The previous crop failed, trying again."},
            SLICE_ERROR,
        ),
        FLAG,
        err(
            "image_crop",
            {"path": RECEIPT, "box": BOX, "explanation": "Maybe it was transient; one more time."},
            SLICE_ERROR,
        ),
        err(
            "image_crop",
            {"path": RECEIPT, "box": BOX, "explanation": "Retrying with the same box."},
            SLICE_ERROR,
        ),
        rule="exact_repeat",
    ),
    trace(
        "crop_loop_after_long_healthy_work",
        "fifteen healthy coding steps, then the crop loop",
        _coding_prefix(),
        START,
        err("image_crop", {"path": RECEIPT, "box": BOX}, SLICE_ERROR),
        err("image_crop", {"path": RECEIPT, "box": BOX}, SLICE_ERROR),
        FLAG,
        err("image_crop", {"path": RECEIPT, "box": BOX}, SLICE_ERROR),
        [err("image_crop", {"path": RECEIPT, "box": BOX}, SLICE_ERROR) for _ in range(8)],
        rule="exact_repeat",
    ),
    # --- near-duplicate retries with jittered arguments -------------------------------------
    trace(
        "crop_jittered_coords",
        "the agent nudges the crop box by a few pixels each time; the error echoes the numbers",
        ok("load_image", {"path": RECEIPT}, {"width": 1200, "height": 1600}),
        START,
        err(
            "image_crop",
            {"path": RECEIPT, "box": [820, 1400, 1180, 1330]},
            "invalid slice: y2 (1330) must be greater than y1 (1400)",
        ),
        say("Let me adjust the box slightly."),
        err(
            "image_crop",
            {"path": RECEIPT, "box": [818, 1402, 1181, 1329]},
            "invalid slice: y2 (1329) must be greater than y1 (1402)",
        ),
        say("Adjusting again."),
        FLAG,
        err(
            "image_crop",
            {"path": RECEIPT, "box": [822, 1398, 1178, 1331]},
            "invalid slice: y2 (1331) must be greater than y1 (1398)",
        ),
        err(
            "image_crop",
            {"path": RECEIPT, "box": [825, 1395, 1175, 1335]},
            "invalid slice: y2 (1335) must be greater than y1 (1395)",
        ),
        err(
            "image_crop",
            {"path": RECEIPT, "box": [819, 1401, 1182, 1328]},
            "invalid slice: y2 (1328) must be greater than y1 (1401)",
        ),
        rule="near_duplicate",
    ),
    trace(
        "refund_amount_jitter",
        "refund_api rejects the amount; the agent retries with 19.99, 20.0, 19.9 …",
        ok("get_order", {"order_id": "A-1"}, {"total": 19.99, "refunded": 19.99}),
        START,
        err(
            "refund_api",
            {"order_id": "A-1", "amount": 19.99, "request_id": rid(1)},
            "HTTP 422: invalid amount 19.99 (max refundable 0.00)",
        ),
        err(
            "refund_api",
            {"order_id": "A-1", "amount": 20.0, "request_id": rid(2)},
            "HTTP 422: invalid amount 20.0 (max refundable 0.00)",
        ),
        FLAG,
        err(
            "refund_api",
            {"order_id": "A-1", "amount": 19.9, "request_id": rid(3)},
            "HTTP 422: invalid amount 19.9 (max refundable 0.00)",
        ),
        err(
            "refund_api",
            {"order_id": "A-1", "amount": 19.0, "request_id": rid(4)},
            "HTTP 422: invalid amount 19.0 (max refundable 0.00)",
        ),
        rule="near_duplicate",
    ),
    trace(
        "str_replace_old_text_not_found",
        "a SWE agent keeps re-typing the text to replace with small whitespace/quote changes",
        ok("read_file", {"path": "src/app.py"}, "def total(items):\n    return sum(items)\n"),
        START,
        err(
            "edit_file",
            {
                "path": "src/app.py",
                "old_str": "def total(items):\n  return sum(items)",
                "new_str": "def total(items):\n    return sum(i.price for i in items)",
            },
            "No replacement was performed: old_str did not appear verbatim in src/app.py.",
        ),
        err(
            "edit_file",
            {
                "path": "src/app.py",
                "old_str": "def total(items) :\n   return sum(items)",
                "new_str": "def total(items):\n    return sum(i.price for i in items)",
            },
            "No replacement was performed: old_str did not appear verbatim in src/app.py.",
        ),
        FLAG,
        err(
            "edit_file",
            {
                "path": "src/app.py",
                "old_str": "def total( items ):\n  return sum(items)",
                "new_str": "def total(items):\n    return sum(i.price for i in items)",
            },
            "No replacement was performed: old_str did not appear verbatim in src/app.py.",
        ),
        rule="near_duplicate",
    ),
    trace(
        "pip_install_version_variants",
        "pip cannot find a version; the agent respells the requirement each time",
        ok("shell", {"command": "python --version"}, "Python 3.12.4"),
        START,
        err(
            "shell",
            {"command": "pip install pillow==9.0"},
            "ERROR: No matching distribution found for pillow==9.0",
        ),
        err(
            "shell",
            {"command": "pip install pillow==9.0.0"},
            "ERROR: No matching distribution found for pillow==9.0.0",
        ),
        FLAG,
        err(
            "shell",
            {"command": "pip install 'pillow==9.0'"},
            "ERROR: No matching distribution found for pillow==9.0",
        ),
        err(
            "shell",
            {"command": "pip install  pillow==9.0.0 "},
            "ERROR: No matching distribution found for pillow==9.0.0",
        ),
        rule="near_duplicate",
    ),
    trace(
        "sql_relation_missing_rewritten",
        "the same wrong table name, re-queried with cosmetic rewrites of the SQL",
        ok("list_tables", {"schema": "public"}, ["orders", "customers", "refunds"]),
        START,
        err(
            "run_sql",
            {"query": "SELECT * FROM order WHERE id = 42"},
            'ERROR: relation "order" does not exist',
        ),
        err(
            "run_sql",
            {"query": "select * from order where id=42;"},
            'ERROR: relation "order" does not exist',
        ),
        FLAG,
        err(
            "run_sql",
            {"query": "SELECT * FROM order WHERE id = 42 LIMIT 1"},
            'ERROR: relation "order" does not exist',
        ),
        rule="near_duplicate",
    ),
    trace(
        "click_selector_variants",
        "a browser agent keeps clicking a missing submit button, re-spelling the selector",
        ok("goto", {"url": "https://shop.example/checkout"}, {"title": "Checkout", "status": 200}),
        START,
        err(
            "click",
            {"selector": "#submit"},
            "Timeout 30000ms exceeded waiting for locator('#submit')",
        ),
        err(
            "click",
            {"selector": "button#submit"},
            "Timeout 30000ms exceeded waiting for locator('button#submit')",
        ),
        FLAG,
        err(
            "click",
            {"selector": "#submit-button"},
            "Timeout 30000ms exceeded waiting for locator('#submit-button')",
        ),
        err(
            "click",
            {"selector": "#submit"},
            "Timeout 30000ms exceeded waiting for locator('#submit')",
        ),
        rule="near_duplicate",
    ),
    trace(
        "ticket_reworded_three_times",
        "the agent opens the same support ticket three times with a reworded title",
        ok("get_customer", {"customer_id": "C-881"}, {"name": "Li Wei", "tier": "gold"}),
        START,
        ok(
            "create_ticket",
            {
                "customer_id": "C-881",
                "title": "Refund not received for order A-1",
                "body": "Customer reports the refund for A-1 has not arrived.",
            },
            {"ticket_id": "T-5001", "status": "open"},
            side_effect=True,
        ),
        say("The ticket is created. Let me make sure support sees it."),
        ok(
            "create_ticket",
            {
                "customer_id": "C-881",
                "title": "Refund not received for order A-1 (follow-up)",
                "body": "Customer reports the refund for A-1 has still not arrived.",
            },
            {"ticket_id": "T-5002", "status": "open"},
            side_effect=True,
        ),
        FLAG,
        ok(
            "create_ticket",
            {
                "customer_id": "C-881",
                "title": "Refund not received for order A-1 - customer waiting",
                "body": "Customer says the refund for A-1 has not arrived.",
            },
            {"ticket_id": "T-5003", "status": "open"},
            side_effect=True,
        ),
        rule="near_duplicate",
    ),
    # --- the same side effect repeated ----------------------------------------------------
    trace(
        "ticket_created_three_times",
        "create_ticket with identical arguments; each call returns a new ticket id",
        ok("search_tickets", {"customer_id": "C-204"}, []),
        START,
        [
            [
                ok(
                    "create_ticket",
                    {
                        "customer_id": "C-204",
                        "title": "Printer offline in room 3",
                        "priority": "high",
                    },
                    {"ticket_id": f"T-{7000 + i}", "created_at": ts(i)},
                    side_effect=True,
                ),
                say("Done. Now I'll file the ticket for the printer."),
            ]
            for i in range(2)
        ],
        FLAG,
        ok(
            "create_ticket",
            {"customer_id": "C-204", "title": "Printer offline in room 3", "priority": "high"},
            {"ticket_id": "T-7002", "created_at": ts(2)},
            side_effect=True,
        ),
        [
            ok(
                "create_ticket",
                {"customer_id": "C-204", "title": "Printer offline in room 3", "priority": "high"},
                {"ticket_id": f"T-{7003 + i}", "created_at": ts(3 + i)},
                side_effect=True,
            )
            for i in range(4)
        ],
        rule="exact_repeat",
    ),
    trace(
        "email_sent_again_and_again",
        "send_email succeeds and the agent sends the same mail again",
        ok("lookup_contact", {"name": "Ana"}, {"email": "ana@example.com"}),
        START,
        ok(
            "send_email",
            {
                "to": "ana@example.com",
                "subject": "Your refund",
                "body": "Your refund of 20 EUR is on its way.",
            },
            {"message_id": "<m1@mail>", "status": "sent"},
            side_effect=True,
        ),
        ok(
            "send_email",
            {
                "to": "ana@example.com",
                "subject": "Your refund",
                "body": "Your refund of 20 EUR is on its way.",
            },
            {"message_id": "<m2@mail>", "status": "sent"},
            side_effect=True,
        ),
        FLAG,
        ok(
            "send_email",
            {
                "to": "ana@example.com",
                "subject": "Your refund",
                "body": "Your refund of 20 EUR is on its way.",
            },
            {"message_id": "<m3@mail>", "status": "sent"},
            side_effect=True,
        ),
        rule="exact_repeat",
    ),
    trace(
        "points_deducted_repeatedly",
        "a loyalty tool deducts points on every call; each retry carries a fresh idempotency key",
        ok("get_member", {"member_id": "M-7"}, {"points": 2300}),
        START,
        ok(
            "deduct_points",
            {"member_id": "M-7", "points": 500, "idempotency_key": rid(10)},
            {"balance": 1800},
            side_effect=True,
        ),
        say("Points deducted; confirming the redemption."),
        ok(
            "deduct_points",
            {"member_id": "M-7", "points": 500, "idempotency_key": rid(11)},
            {"balance": 1300},
            side_effect=True,
        ),
        say("Confirming the redemption again."),
        FLAG,
        ok(
            "deduct_points",
            {"member_id": "M-7", "points": 500, "idempotency_key": rid(12)},
            {"balance": 800},
            side_effect=True,
        ),
        rule="exact_repeat",
    ),
    # --- cycles -----------------------------------------------------------------------------
    trace(
        "search_fetch_abab",
        "search, fetch the top hit, search the same thing again, fetch the same page again …",
        say("I need the change-freeze policy."),
        START,
        ok(
            "web_search",
            {"query": "national holiday change freeze policy"},
            [{"url": "https://wiki.example/freeze", "title": "Change freeze"}],
        ),
        ok("fetch", {"url": "https://wiki.example/freeze"}, "<h1>Change freeze</h1><p>TBD</p>"),
        ok(
            "web_search",
            {"query": "national holiday change freeze policy"},
            [{"url": "https://wiki.example/freeze", "title": "Change freeze"}],
        ),
        ok("fetch", {"url": "https://wiki.example/freeze"}, "<h1>Change freeze</h1><p>TBD</p>"),
        FLAG,
        [
            [
                ok(
                    "web_search",
                    {"query": "national holiday change freeze policy"},
                    [{"url": "https://wiki.example/freeze", "title": "Change freeze"}],
                ),
                ok(
                    "fetch",
                    {"url": "https://wiki.example/freeze"},
                    "<h1>Change freeze</h1><p>TBD</p>",
                ),
            ]
            for _ in range(6)
        ],
        rule="cycle",
    ),
    trace(
        "search_fetch_abab_with_thoughts_and_trace_ids",
        "the same search/fetch round trip, with thoughts in between and trace ids in the results",
        START,
        ok(
            "web_search",
            {"query": "python pillow crop"},
            {"hits": ["https://pillow.readthedocs.io/crop"], "trace_id": rid(0)},
        ),
        ok(
            "fetch",
            {"url": "https://pillow.readthedocs.io/crop"},
            {"text": "Image.crop(box) returns a rectangular region", "trace_id": rid(1)},
        ),
        say("That doesn't explain the error. Let me search again."),
        ok(
            "web_search",
            {"query": "python pillow crop"},
            {"hits": ["https://pillow.readthedocs.io/crop"], "trace_id": rid(2)},
        ),
        ok(
            "fetch",
            {"url": "https://pillow.readthedocs.io/crop"},
            {"text": "Image.crop(box) returns a rectangular region", "trace_id": rid(3)},
        ),
        say("Still nothing. Searching once more."),
        FLAG,
        ok(
            "web_search",
            {"query": "python pillow crop"},
            {"hits": ["https://pillow.readthedocs.io/crop"], "trace_id": rid(4)},
        ),
        ok(
            "fetch",
            {"url": "https://pillow.readthedocs.io/crop"},
            {"text": "Image.crop(box) returns a rectangular region", "trace_id": rid(5)},
        ),
        rule="cycle",
    ),
    trace(
        "list_read_grep_cycle",
        "list a folder, read a file, grep for a symbol, and start over, three steps per round",
        say("Where is FREEZE_WINDOW defined?"),
        START,
        [
            [
                ok("list_dir", {"path": "config"}, ["base.yaml", "prod.yaml"]),
                ok("read_file", {"path": "config/prod.yaml"}, "deploys: true\nregion: eu\n"),
                ok("grep", {"pattern": "FREEZE_WINDOW", "path": "config"}, []),
            ]
            for _ in range(1)
        ],
        ok("list_dir", {"path": "config"}, ["base.yaml", "prod.yaml"]),
        ok("read_file", {"path": "config/prod.yaml"}, "deploys: true\nregion: eu\n"),
        ok("grep", {"pattern": "FREEZE_WINDOW", "path": "config"}, []),
        FLAG,
        [
            [
                ok("list_dir", {"path": "config"}, ["base.yaml", "prod.yaml"]),
                ok("read_file", {"path": "config/prod.yaml"}, "deploys: true\nregion: eu\n"),
                ok("grep", {"pattern": "FREEZE_WINDOW", "path": "config"}, []),
            ]
            for _ in range(3)
        ],
        rule="cycle",
    ),
    trace(
        "undo_redo_config_flip",
        "the agent flips a setting, flips it back, flips it again",
        ok("read_file", {"path": "deploy/config.yaml"}, "retries: 3\ntimeout: 30\n"),
        START,
        ok(
            "edit_file",
            {"path": "deploy/config.yaml", "old": "retries: 3", "new": "retries: 5"},
            "Edited deploy/config.yaml (1 replacement)",
        ),
        ok(
            "edit_file",
            {"path": "deploy/config.yaml", "old": "retries: 5", "new": "retries: 3"},
            "Edited deploy/config.yaml (1 replacement)",
        ),
        ok(
            "edit_file",
            {"path": "deploy/config.yaml", "old": "retries: 3", "new": "retries: 5"},
            "Edited deploy/config.yaml (1 replacement)",
        ),
        ok(
            "edit_file",
            {"path": "deploy/config.yaml", "old": "retries: 5", "new": "retries: 3"},
            "Edited deploy/config.yaml (1 replacement)",
        ),
        FLAG,
        ok(
            "edit_file",
            {"path": "deploy/config.yaml", "old": "retries: 3", "new": "retries: 5"},
            "Edited deploy/config.yaml (1 replacement)",
        ),
        rule="cycle",
    ),
    trace(
        "browser_four_step_round",
        "a web agent walks the same four pages in the same order, twice and more",
        ok("goto", {"url": "https://portal.example/login"}, {"title": "Portal"}),
        START,
        [
            [
                ok(
                    "goto", {"url": "https://portal.example/orders"}, {"title": "Orders", "rows": 0}
                ),
                ok("click", {"selector": "text=Filters"}, {"title": "Orders", "panel": "filters"}),
                ok("click", {"selector": "text=Apply"}, {"title": "Orders", "rows": 0}),
                ok("screenshot", {"full_page": True}, {"digest": "9c1f00aa"}),
            ]
            for _ in range(1)
        ],
        ok("goto", {"url": "https://portal.example/orders"}, {"title": "Orders", "rows": 0}),
        ok("click", {"selector": "text=Filters"}, {"title": "Orders", "panel": "filters"}),
        ok("click", {"selector": "text=Apply"}, {"title": "Orders", "rows": 0}),
        ok("screenshot", {"full_page": True}, {"digest": "9c1f00aa"}),
        FLAG,
        [
            [
                ok(
                    "goto", {"url": "https://portal.example/orders"}, {"title": "Orders", "rows": 0}
                ),
                ok("click", {"selector": "text=Filters"}, {"title": "Orders", "panel": "filters"}),
            ]
        ],
        rule="cycle",
    ),
    trace(
        "kb_five_step_round",
        "a support agent runs the same five lookups in the same order again",
        say("Looking up the customer's shipping issue."),
        START,
        [
            [
                ok("kb_search", {"query": "delayed shipment EU"}, ["KB-12", "KB-40"]),
                ok("kb_article", {"id": "KB-12"}, "Shipments may be delayed during holidays."),
                ok("get_order", {"order_id": "B-77"}, {"status": "in transit"}),
                ok("carrier_status", {"tracking": "ZX9"}, {"status": "no update"}),
                ok("kb_article", {"id": "KB-40"}, "Contact the carrier after 10 days."),
            ]
        ],
        ok("kb_search", {"query": "delayed shipment EU"}, ["KB-12", "KB-40"]),
        ok("kb_article", {"id": "KB-12"}, "Shipments may be delayed during holidays."),
        ok("get_order", {"order_id": "B-77"}, {"status": "in transit"}),
        ok("carrier_status", {"tracking": "ZX9"}, {"status": "no update"}),
        ok("kb_article", {"id": "KB-40"}, "Contact the carrier after 10 days."),
        FLAG,
        ok("kb_search", {"query": "delayed shipment EU"}, ["KB-12", "KB-40"]),
        rule="cycle",
    ),
    trace(
        "deploy_status_flapping",
        "a status tool flaps between a 503 and 'degraded'; the agent keeps asking",
        ok("list_services", {}, ["checkout", "search"]),
        START,
        err("deploy_status", {"service": "checkout"}, "HTTP 503 Service Unavailable"),
        ok(
            "deploy_status",
            {"service": "checkout"},
            {"state": "degraded", "ready": "2/3", "checked_at": ts(1)},
        ),
        err("deploy_status", {"service": "checkout"}, "HTTP 503 Service Unavailable"),
        ok(
            "deploy_status",
            {"service": "checkout"},
            {"state": "degraded", "ready": "2/3", "checked_at": ts(3)},
        ),
        FLAG,
        [
            [
                err("deploy_status", {"service": "checkout"}, "HTTP 503 Service Unavailable"),
                ok(
                    "deploy_status",
                    {"service": "checkout"},
                    {"state": "degraded", "ready": "2/3", "checked_at": ts(5 + i)},
                ),
            ]
            for i in range(5)
        ],
        rule="cycle",
    ),
    trace(
        "restart_then_healthcheck_fails",
        "restart the service, health check fails, restart again, same failure …",
        ok("get_logs", {"service": "billing", "lines": 50}, "OOMKilled"),
        START,
        ok("restart_service", {"service": "billing"}, {"restarted": True}),
        err("health_check", {"service": "billing"}, "HTTP 503 after 1.2s: upstream not ready"),
        ok("restart_service", {"service": "billing"}, {"restarted": True}),
        err("health_check", {"service": "billing"}, "HTTP 503 after 0.9s: upstream not ready"),
        FLAG,
        [
            [
                ok("restart_service", {"service": "billing"}, {"restarted": True}),
                err(
                    "health_check",
                    {"service": "billing"},
                    "HTTP 503 after 1.4s: upstream not ready",
                ),
            ]
            for _ in range(4)
        ],
        rule="cycle",
    ),
    trace(
        "build_read_edit_cycle",
        "cargo check fails, the agent reads the file and re-applies an edit that changes nothing",
        ok("read_file", {"path": "src/main.rs"}, 'fn main() {\n    let x: u32 = "1";\n}\n'),
        START,
        err(
            "shell",
            {"command": "cargo check"},
            "error[E0308]: mismatched types at src/main.rs:2:18",
        ),
        ok("read_file", {"path": "src/main.rs"}, "fn main() {\n    let x: u32 = 1u32;\n}\n"),
        ok(
            "edit_file",
            {"path": "src/main.rs", "old": "let x: u32 = 1u32;", "new": "let x: u32 = 1u32;"},
            "No changes made",
        ),
        err(
            "shell",
            {"command": "cargo check"},
            "error[E0308]: mismatched types at src/main.rs:2:18",
        ),
        ok("read_file", {"path": "src/main.rs"}, "fn main() {\n    let x: u32 = 1u32;\n}\n"),
        ok(
            "edit_file",
            {"path": "src/main.rs", "old": "let x: u32 = 1u32;", "new": "let x: u32 = 1u32;"},
            "No changes made",
        ),
        FLAG,
        err(
            "shell",
            {"command": "cargo check"},
            "error[E0308]: mismatched types at src/main.rs:2:18",
        ),
        rule="cycle",
    ),
    # --- idle agent turns -----------------------------------------------------------------
    trace(
        "empty_assistant_turns",
        "after a tool result the model keeps returning empty messages",
        ok("read_file", {"path": "README.md"}, "# Shop\n"),
        START,
        say(""),
        say(None),
        FLAG,
        say("   "),
        [say("") for _ in range(10)],
        rule="idle_turns",
    ),
    trace(
        "repeated_intent_without_action",
        "the model announces the same next step over and over without calling the tool",
        ok("edit_file", {"path": "src/crop.py", "old": "a", "new": "b"}, "Edited src/crop.py"),
        START,
        say("I'll now run the tests to verify the fix."),
        say("I'll now run the tests to verify the fix!"),
        FLAG,
        say("I'll now run the tests to verify the fix."),
        say("I'll now run the tests to verify the fix (attempt 4)."),
        rule="idle_turns",
    ),
    trace(
        "empty_and_repeated_turns_mixed",
        "a repeated promise and empty messages alternate",
        ok("get_logs", {"service": "api", "lines": 20}, "ok"),
        START,
        say("Let me check the logs."),
        say(""),
        FLAG,
        say("Let me check the logs."),
        say(""),
        rule="idle_turns",
    ),
    trace(
        "think_tool_loop",
        "the agent calls a 'think' tool with the same thought and never acts",
        ok("load_image", {"path": RECEIPT}, {"width": 1200, "height": 1600}),
        START,
        ok("think", {"thought": "I need to crop the total before reading it."}, "ok"),
        ok("think", {"thought": "I need to crop the total before reading it."}, "ok"),
        FLAG,
        ok("think", {"thought": "I need to crop the total, before reading it."}, "ok"),
        ok("think", {"thought": "I need to crop the total before reading it."}, "ok"),
        rule="idle_turns",
    ),
    # --- context overflow / condensation loops --------------------------------------------
    trace(
        "condensation_loop_rereads",
        "after each condensation the agent re-reads the same big files and overflows again",
        ok("read_file", {"path": "logs/app-1.log"}, "A" * 50 + " part 1"),
        ok("read_file", {"path": "logs/app-2.log"}, "B" * 50 + " part 2"),
        ok("read_file", {"path": "logs/app-3.log"}, "C" * 50 + " part 3"),
        ok("grep", {"pattern": "ERROR", "path": "logs"}, ["app-2.log:991"]),
        START,
        ok("condense", {}, {"summary": "Read three logs; error at app-2.log:991.", "kept": 12}),
        ok("read_file", {"path": "logs/app-2.log"}, "B" * 50 + " part 2"),
        ok("read_file", {"path": "logs/app-1.log"}, "A" * 50 + " part 1"),
        ok("condense", {}, {"summary": "Re-read app-2 and app-1 logs.", "kept": 11}),
        ok("read_file", {"path": "logs/app-3.log"}, "C" * 50 + " part 3"),
        ok("read_file", {"path": "logs/app-2.log"}, "B" * 50 + " part 2"),
        ok("read_file", {"path": "logs/app-1.log"}, "A" * 50 + " part 1"),
        FLAG,
        ok("condense", {}, {"summary": "Read logs again; looking for the error.", "kept": 12}),
        ok("read_file", {"path": "logs/app-1.log"}, "A" * 50 + " part 1"),
        ok("condense", {}, {"summary": "Reading logs.", "kept": 10}),
        rule="context_overflow",
    ),
    trace(
        "model_context_exceeded_turns",
        "the model call itself overflows; the runtime condenses; the agent reloads the same dump",
        START,
        ok("get_logs", {"service": "search", "lines": 5000}, "x" * 80),
        overflowed(
            "This model's maximum context length is 128000 tokens. However, your messages "
            "resulted in 131072 tokens."
        ),
        ok("summarize_context", {"keep_last": 4}, {"summary": "Fetched 5000 log lines."}),
        ok("get_logs", {"service": "search", "lines": 5000}, "x" * 80),
        overflowed(
            "This model's maximum context length is 128000 tokens. However, your messages "
            "resulted in 131550 tokens."
        ),
        ok("summarize_context", {"keep_last": 4}, {"summary": "Fetched the logs again."}),
        FLAG,
        ok("get_logs", {"service": "search", "lines": 5000}, "x" * 80),
        overflowed(
            "This model's maximum context length is 128000 tokens. However, your messages "
            "resulted in 130990 tokens."
        ),
        ok("summarize_context", {"keep_last": 4}, {"summary": "Logs fetched."}),
        rule="exact_repeat",
    ),
    trace(
        "overflow_reloads_with_varied_sizes",
        "the agent reloads the logs with a different line count each time and overflows again",
        ok("list_services", {}, ["search", "billing"]),
        START,
        ok("get_logs", {"service": "search", "lines": 5000}, "a" * 80),
        overflowed("prompt is too long: 212000 tokens > 200000 maximum"),
        ok("condense_context", {}, {"summary": "Pulled 5000 lines of search logs."}),
        ok("get_logs", {"service": "search", "lines": 6000}, "b" * 80),
        overflowed("prompt is too long: 230500 tokens > 200000 maximum"),
        ok("condense_context", {}, {"summary": "Pulled 6000 lines of search logs."}),
        ok("get_logs", {"service": "search", "lines": 4000}, "c" * 80),
        FLAG,
        overflowed("prompt is too long: 204100 tokens > 200000 maximum"),
        ok("condense_context", {}, {"summary": "Pulled 4000 lines of search logs."}),
        rule="context_overflow",
    ),
    trace(
        "huge_file_overflow_error",
        "reading a huge file fails with context_length_exceeded, the runtime condenses, repeat",
        ok("list_dir", {"path": "data"}, ["dump.json"]),
        START,
        err(
            "read_file",
            {"path": "data/dump.json"},
            "context_length_exceeded: input is 410233 tokens, limit 200000",
        ),
        ok("condense", {}, {"summary": "Tried to read dump.json."}),
        err(
            "read_file",
            {"path": "data/dump.json"},
            "context_length_exceeded: input is 410233 tokens, limit 200000",
        ),
        ok("condense", {}, {"summary": "Tried to read dump.json again."}),
        FLAG,
        err(
            "read_file",
            {"path": "data/dump.json"},
            "context_length_exceeded: input is 410233 tokens, limit 200000",
        ),
        ok("condense", {}, {"summary": "dump.json is too big."}),
        rule="exact_repeat",
    ),
    # --- a tool that is down ----------------------------------------------------------------
    trace(
        "fetch_outage_different_urls",
        "the fetch tool is down; the agent tries one URL after another",
        ok(
            "web_search",
            {"query": "holiday freeze calendar"},
            ["https://a.example/1", "https://b.example/2", "https://c.example/3"],
        ),
        START,
        err("fetch", {"url": "https://a.example/1"}, "HTTP 503 from egress proxy"),
        say("That page failed; trying the next result."),
        err("fetch", {"url": "https://b.example/2"}, "timeout after 30s"),
        err("fetch", {"url": "https://c.example/3"}, "HTTP 503 from egress proxy"),
        say("Let me try the site's mirror."),
        err("fetch", {"url": "https://mirror.c.example/3"}, "HTTP 502 from egress proxy"),
        FLAG,
        err("fetch", {"url": "https://a.example/1?amp=1"}, "HTTP 503 from egress proxy"),
        err("fetch", {"url": "https://d.example/4"}, "timeout after 30s"),
        rule="circuit_breaker",
    ),
    trace(
        "database_connection_refused",
        "the database is down; the agent queries table after table",
        say("Let me look at the refunds."),
        START,
        err(
            "run_sql",
            {"query": "SELECT count(*) FROM refunds"},
            "could not connect to server: Connection refused (10.0.3.4:5432)",
        ),
        err(
            "run_sql",
            {"query": "SELECT * FROM orders LIMIT 5"},
            "could not connect to server: Connection refused (10.0.3.4:5432)",
        ),
        err(
            "run_sql",
            {"query": "SELECT id, email FROM customers WHERE tier = 'gold'"},
            "could not connect to server: Connection refused (10.0.3.4:5432)",
        ),
        err(
            "run_sql",
            {"query": "SHOW TABLES"},
            "could not connect to server: Connection refused (10.0.3.4:5432)",
        ),
        FLAG,
        err(
            "run_sql",
            {"query": "SELECT now()"},
            "could not connect to server: Connection refused (10.0.3.4:5432)",
        ),
        rule="circuit_breaker",
    ),
    trace(
        "browser_crashed",
        "the headless browser died; every action fails, whatever the agent clicks",
        ok("goto", {"url": "https://portal.example"}, {"title": "Portal"}),
        START,
        err(
            "click", {"selector": "text=Orders"}, "Target page, context or browser has been closed"
        ),
        err(
            "click",
            {"selector": "text=Invoices"},
            "Target page, context or browser has been closed",
        ),
        err(
            "goto",
            {"url": "https://portal.example/orders"},
            "Target page, context or browser has been closed",
        ),
        err("click", {"selector": "#menu"}, "Target page, context or browser has been closed"),
        FLAG,
        err(
            "click",
            {"selector": "nav >> text=Reports"},
            "Target page, context or browser has been closed",
        ),
        err(
            "click",
            {"selector": "text=Settings"},
            "Target page, context or browser has been closed",
        ),
        err("click", {"selector": "text=Help"}, "Target page, context or browser has been closed"),
        rule="circuit_breaker",
    ),
    # --- polling that never finishes ------------------------------------------------------
    trace(
        "deploy_log_retrying_forever",
        "a deploy hangs retrying its database; each log poll shows a new attempt number",
        ok("deploy", {"service": "checkout", "version": "v7.3"}, {"deploy_id": "d-118"}),
        START,
        [
            [
                ok(
                    "tail_log",
                    {"deploy_id": "d-118", "lines": 3},
                    f"{ts(i)} retrying connection to db-primary (attempt {i + 1})",
                ),
                ok("sleep", {"seconds": 30}, "slept 30s"),
            ]
            for i in range(40)
        ],
        FLAG,
        ok(
            "tail_log",
            {"deploy_id": "d-118", "lines": 3},
            f"{ts(40)} retrying connection to db-primary (attempt 41)",
        ),
        ok("sleep", {"seconds": 30}, "slept 30s"),
        ok(
            "tail_log",
            {"deploy_id": "d-118", "lines": 3},
            f"{ts(41)} retrying connection to db-primary (attempt 42)",
        ),
        rule="poll_budget",
    ),
    # --- more exact repeats from the field --------------------------------------------------
    trace(
        "git_commit_nothing_to_commit",
        "git commit fails because nothing is staged; the agent commits again and again",
        ok("git_status", {}, "nothing to commit, working tree clean"),
        START,
        err("git_commit", {"message": "Fix crop bounds"}, "nothing to commit, working tree clean"),
        err("git_commit", {"message": "Fix crop bounds"}, "nothing to commit, working tree clean"),
        FLAG,
        err("git_commit", {"message": "Fix crop bounds"}, "nothing to commit, working tree clean"),
        rule="exact_repeat",
    ),
    trace(
        "tests_rerun_without_changes",
        "the same failing test run repeated with nothing changed in between (timings differ)",
        ok("edit_file", {"path": "src/crop.py", "old": "y1", "new": "y2"}, "Edited src/crop.py"),
        START,
        err(
            "run_tests",
            {"cmd": "pytest tests/test_crop.py -q"},
            "FAILED tests/test_crop.py::test_bounds - AssertionError\n1 failed, 12 passed in 0.84s",
        ),
        say("Let me run them again."),
        err(
            "run_tests",
            {"cmd": "pytest tests/test_crop.py -q"},
            "FAILED tests/test_crop.py::test_bounds - AssertionError\n1 failed, 12 passed in 0.91s",
        ),
        FLAG,
        err(
            "run_tests",
            {"cmd": "pytest  tests/test_crop.py  -q"},
            "FAILED tests/test_crop.py::test_bounds - AssertionError\n1 failed, 12 passed in 0.79s",
        ),
        rule="exact_repeat",
    ),
    trace(
        "login_401_with_nonce",
        "login with wrong credentials retried unchanged (only the nonce differs)",
        ok("get_secret", {"name": "svc-bot"}, {"user": "svc-bot"}),
        START,
        [
            err(
                "login",
                {"user": "svc-bot", "password": "hunter2", "nonce": rid(30 + i)},
                "401 Unauthorized: invalid credentials",
            )
            for i in range(2)
        ],
        FLAG,
        err(
            "login",
            {"user": "svc-bot", "password": "hunter2", "nonce": rid(40)},
            "401 Unauthorized: invalid credentials",
        ),
        rule="exact_repeat",
    ),
    trace(
        "pagination_cursor_not_advancing",
        "the agent keeps passing the same cursor and gets the same page back",
        ok("list_orders", {"limit": 50}, {"items": ["A-1", "A-2"], "next": "eyJwIjoyfQ"}),
        START,
        ok(
            "list_orders",
            {"limit": 50, "cursor": "eyJwIjoyfQ"},
            {"items": ["A-51", "A-52"], "next": "eyJwIjozfQ", "fetched_at": ts(1)},
        ),
        ok(
            "list_orders",
            {"limit": 50, "cursor": "eyJwIjoyfQ"},
            {"items": ["A-51", "A-52"], "next": "eyJwIjozfQ", "fetched_at": ts(2)},
        ),
        FLAG,
        ok(
            "list_orders",
            {"limit": 50, "cursor": "eyJwIjoyfQ"},
            {"items": ["A-51", "A-52"], "next": "eyJwIjozfQ", "fetched_at": ts(3)},
        ),
        rule="exact_repeat",
    ),
    trace(
        "poll_stuck_at_same_percentage",
        "a training job is stuck at 45 %; every poll, a minute apart, says so (only the timestamp "
        "changes); waiting between polls is patient, so it is flagged past the poll budget "
        "(relabelled: it used to be flagged at the third identical poll)",
        ok("start_job", {"name": "exp-42"}, {"job_id": "exp-42"}),
        ok(
            "job_status",
            {"job_id": "exp-42"},
            {"state": "running", "progress": 12, "updated_at": ts(0)},
        ),
        ok("sleep", {"seconds": 60}, "slept 60s"),
        START,
        [
            [
                ok(
                    "job_status",
                    {"job_id": "exp-42"},
                    {"state": "running", "progress": 45, "updated_at": ts(k)},
                ),
                ok("sleep", {"seconds": 60}, "slept 60s"),
            ]
            for k in range(1, 40)
        ],
        FLAG,
        ok(
            "job_status",
            {"job_id": "exp-42"},
            {"state": "running", "progress": 45, "updated_at": ts(40)},
        ),
        ok("sleep", {"seconds": 60}, "slept 60s"),
        rule="poll_budget",
    ),
    trace(
        "debugger_continue_waiting",
        "the debugger says the program waits for input; the agent sends 'continue' again and again",
        ok("debugger", {"cmd": "break app.py:88"}, "Breakpoint 1 at app.py:88"),
        ok("debugger", {"cmd": "run"}, "Breakpoint 1, app.py:88"),
        START,
        ok("debugger", {"cmd": "continue"}, "Program is waiting for input at app.py:90"),
        ok("debugger", {"cmd": "continue"}, "Program is waiting for input at app.py:90"),
        FLAG,
        ok("debugger", {"cmd": "continue"}, "Program is waiting for input at app.py:90"),
        rule="exact_repeat",
    ),
    trace(
        "search_same_results_trace_ids",
        "the same search three times; only request/trace ids in the response differ",
        say("Searching for the refund policy."),
        START,
        [
            ok(
                "kb_search",
                {"query": "refund policy holidays", "request_id": rid(50 + i)},
                {"hits": ["KB-7", "KB-9"], "request_id": rid(50 + i), "took_ms": 40 + i},
            )
            for i in range(2)
        ],
        FLAG,
        ok(
            "kb_search",
            {"query": "refund policy  holidays", "request_id": rid(60)},
            {"hits": ["KB-7", "KB-9"], "request_id": rid(60), "took_ms": 38},
        ),
        rule="exact_repeat",
    ),
]

"""The demo's scenarios, modelled on real incidents, and the deterministic session planner.

Looping scenarios (each loops mostly under its faulty prompt version):

* ``image_inspection``: an image-crop tool answers "invalid slice" for out-of-range coordinates and
  the agent re-sends the same coordinates.
* ``customer_service``: create a ticket, raise its priority, check its progress; the good prompt
  carries the ticket id from the history, the faulty one opens a new ticket for every follow-up
  until the ticket system refuses duplicates and the agent keeps retrying.
* ``refund``: loyalty points deducted and stock reserved (side effects with compensations), then a
  refund call retried with a wrong amount; the rollback to the start of the turn refunds the points
  and releases the stock.
* ``finance``: an exchange rate fixed early, contradicted later; the faulty prompt keeps posting the
  invoice with the stale rate.
* ``research``: search and fetch oscillate (ABAB) on a paywalled source, then the fetch is
  hammered.

Healthy scenarios (hard negatives for the detector): ``pagination``, ``job_polling`` (the same
call with a moving result) and ``transient_retry`` (an error, then success on retry).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass

from engine.demo.agent import SimAgent, ToolError
from engine.demo.ledger import Ledger

# -- plans ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Version:
    """A prompt version of a scenario."""

    name: str
    weight: float
    """Relative share of sessions that run it."""
    loop_rate: float
    """Probability that a session under this version falls into the scenario's loop."""
    faulty: bool = False


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    versions: tuple[Version, ...]
    script: Callable[[SimAgent, Plan, Ledger], None]
    snapshots: str = "step"
    """"step": write-ahead snapshot before every guarded step; "turn": one per user turn."""
    window: int = 4096
    """Context window used for the token-budget view."""

    @property
    def can_loop(self) -> bool:
        return any(v.loop_rate > 0 for v in self.versions)


@dataclass(frozen=True)
class Plan:
    """Everything decided up front about one simulated session (a pure function of the seed)."""

    index: int
    """Position in the run: the k-th session of slot j has index k * sessions + j."""
    session_id: str
    scenario: str
    prompt_version: str
    faulty: bool
    """The prompt version is the scenario's faulty one."""
    loop: bool
    """The agent will fall into the scenario's loop."""
    tenant: str
    locale: str
    channel: str
    model: str
    finish: bool
    """The session ends with `Session.stop()` (otherwise the user just walks away)."""
    seed: str
    """Seed of the session's own random source."""
    hold: bool = False
    """The session runs under `on_loop="flag"`: when it loops, it waits for a person (on-call)
    instead of being rolled back by the engine."""

    @property
    def meta(self) -> dict:
        meta = {"tenant": self.tenant, "scenario": self.scenario,
                "prompt_version": self.prompt_version, "locale": self.locale,
                "channel": self.channel, "model": self.model, "source": "rewind-demo"}
        if self.hold:
            meta["hold"] = HOLD_LABEL
        return meta


HOLD_LABEL = "waits for on-call"
"""`meta["hold"]` of sessions that loop under the flag policy and wait for an operator."""


TENANTS = (("acme", "en"), ("globex", "en"), ("initech", "en"), ("tianhe", "zh"),
           ("longmen", "zh-CN"), ("nimbus", None))
"""(tenant, locale); None: a tenant serving both languages."""
CHANNELS = {"en": ("web", "app", "email", "slack"), "zh": ("wechat", "app", "web", "mini-program")}
MODELS = ("gpt-4o-mini", "gpt-4.1", "qwen-max", "deepseek-v3", "claude-sonnet")


def scenario_order(seed: int, only: tuple[str, ...] | None = None) -> list[str]:
    """The order in which a run's first sessions go through the scenarios (`only`: a subset)."""
    names = sorted(only if only else SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise ValueError(f"unknown scenario(s) {', '.join(unknown)}: choose from "
                         f"{', '.join(SCENARIOS)}")
    return random.Random(f"{seed}:order").sample(names, len(names))


def plan_session(seed: int, index: int, run: str = "demo",
                 only: tuple[str, ...] | None = None, hold_share: float = 0.0) -> Plan:
    """Plan session number `index` of a run. The same seed gives the same plans.

    The first sessions cover every scenario (of `only`, when given) once, later ones pick at
    random; the first session of each looping scenario runs its faulty prompt version and loops,
    so a fresh fleet shows loops within its first minute.

    `hold_share` of the looping sessions hold (see `Plan.hold`): they wait for on-call instead of
    being rolled back. With any share above 0 the first looping scenario of the run always
    holds, so a fresh fleet has a session waiting for a person within its first minute. The
    hold draw has its own random source: the share never changes anything else in a plan.
    """
    order = scenario_order(seed, only)
    rng = random.Random(f"{seed}:{index}:plan")
    first = index < len(order)
    scenario = SCENARIOS[order[index] if first else rng.choice(order)]
    if first and scenario.can_loop:
        version = next(v for v in scenario.versions if v.faulty)
        loop = True
    else:
        version = rng.choices(scenario.versions, weights=[v.weight for v in scenario.versions])[0]
        loop = rng.random() < version.loop_rate
    first_looping = next((n for n in order if SCENARIOS[n].can_loop), None)
    hold = loop and hold_share > 0 and (
        (first and scenario.name == first_looping)
        or random.Random(f"{seed}:{index}:hold").random() < hold_share)
    tenant, locale = rng.choice(TENANTS)
    if locale is None:
        locale = rng.choice(("en", "zh"))
    lang = "zh" if locale.startswith("zh") else "en"
    return Plan(
        index=index,
        session_id=f"{scenario.name}-{run}-{index:04d}",
        scenario=scenario.name,
        prompt_version=version.name,
        faulty=version.faulty,
        loop=loop,
        tenant=tenant,
        locale=locale,
        channel=rng.choice(CHANNELS[lang]),
        model=rng.choice(MODELS),
        finish=rng.random() < 0.85,
        seed=f"{seed}:{index}",
        hold=hold,
    )


# -- shared data ------------------------------------------------------------------------------
CUSTOMERS_EN = ("Ava Thompson", "Liam Carter", "Noah Patel", "Mia Rossi", "Ethan Brooks",
                "Sofia Nguyen", "Lucas Meyer", "Chloe Dubois")
CUSTOMERS_ZH = ("王芳", "李伟", "张敏", "刘洋", "陈静", "赵磊", "孙悦", "周杰")
PRODUCTS = (  # sku, English, Chinese, price, loyalty points earned
    ("SKU-HP-220", "wireless headphones", "无线降噪耳机", 119.0, 119),
    ("SKU-EM-510", "espresso machine", "意式咖啡机", 329.0, 329),
    ("SKU-RS-044", "running shoes", "跑鞋", 89.0, 89),
    ("SKU-KB-730", "mechanical keyboard", "机械键盘", 149.0, 149),
    ("SKU-AP-118", "air purifier", "空气净化器", 239.0, 239),
)
STREETS = (  # delivery addresses (English, Chinese) a customer moves between
    ("14 Elm Street, Springfield", "上海市徐汇区漕溪北路 88 号"),
    ("221 Baker Street, London", "北京市朝阳区建国路 77 号"),
    ("9 Harbour Road, Leith", "广州市天河区体育西路 12 号"),
    ("310 Pine Avenue, Portland", "深圳市南山区科技园路 5 号"),
)
FX_KEY = "fx.EUR/USD"
"""The finance agent's exchange rate, a keyed fact: the treasury's later rate replaces it."""


TOOL_DOCS = {  # name: (description, parameters) - the tool schemas a runtime puts in the prompt
    "load_image": ("Load an image; returns width, height and thumbnail_scale.",
                   {"image_id": "string"}),
    "detect_objects": ("Detect labelled objects; returns bounding boxes on the thumbnail.",
                       {"image_id": "string", "labels": "array<string>"}),
    "image_crop": ("Crop a region in full-resolution pixels; returns crop_id.",
                   {"image_id": "string", "x": "int", "y": "int", "width": "int",
                    "height": "int"}),
    "classify_damage": ("Classify visible damage in a crop.", {"crop_id": "string"}),
    "ocr": ("Read the text in a crop.", {"crop_id": "string", "lang": "en|zh"}),
    "lookup_order": ("Look an order up.", {"order_id": "string"}),
    "create_ticket": ("Open a support ticket.",
                      {"customer_id": "string", "order_id": "string", "subject": "string",
                       "priority": "low|normal|high (optional)"}),
    "raise_priority": ("Change a ticket's priority.",
                       {"ticket_id": "string", "priority": "low|normal|high"}),
    "get_ticket": ("Read a ticket's status and updates.", {"ticket_id": "string"}),
    "check_return_policy": ("Whether a return is eligible.", {"sku": "string", "reason": "string"}),
    "get_payment": ("The captured payment of an order.", {"order_id": "string"}),
    "deduct_points": ("Deduct loyalty points (side effect).",
                      {"customer_id": "string", "points": "int", "reason": "string"}),
    "reserve_inventory": ("Reserve stock for a replacement (side effect).",
                          {"sku": "string", "qty": "int", "warehouse": "string"}),
    "issue_refund": ("Refund an order (side effect).",
                     {"order_id": "string", "amount": "number", "currency": "string"}),
    "get_fx_rate": ("Reference exchange rate.", {"pair": "string"}),
    "calc_line_items": ("Total invoice line items.",
                        {"invoice_id": "string", "items": "array", "currency": "string"}),
    "post_invoice": ("Book an invoice in USD.",
                     {"invoice_id": "string", "amount_eur": "number", "rate": "number",
                      "amount_usd": "number"}),
    "web_search": ("Search the web.", {"query": "string"}),
    "fetch": ("Fetch a URL and return its text.", {"url": "string"}),
    "list_orders": ("List orders, paginated.",
                    {"status": "string", "since": "date", "page": "int", "page_size": "int"}),
    "export_csv": ("Write rows to a CSV file.", {"rows": "int", "columns": "array<string>"}),
    "submit_report_job": ("Start a report job.", {"report": "string", "region": "string"}),
    "get_job": ("A job's state and progress.", {"job_id": "string"}),
    "download_report": ("Download a finished report.", {"job_id": "string"}),
    "track_shipment": ("Carrier tracking of an order.", {"order_id": "string"}),
    "subscribe_sms": ("SMS on a delivery event.", {"order_id": "string", "event": "string"}),
}


def _start(a: SimAgent, prompt: str, tools: list[str]) -> None:
    """Write the system prompt with the tool schemas, as a runtime sends them to the model."""
    schemas = [{"type": "function", "function": {
        "name": name, "description": TOOL_DOCS[name][0],
        "parameters": {"type": "object", "properties": {
            k: {"type": v} for k, v in TOOL_DOCS[name][1].items()}}}} for name in tools]
    a.start(f"{prompt}\n\n# Tools\n{json.dumps(schemas, ensure_ascii=False, indent=1)}")


def _article(a: SimAgent, company: str, year: int, revenue: float) -> str:
    """A long fetched page (news article), so fetch results weigh on the context window."""
    r = a.rng
    en = [f"{company} today reported results for fiscal {year}.",
          f"Revenue rose to ${revenue} billion, driven by demand in Asia and a stronger "
          "services business.",
          f"Operating margin widened by {r.randint(1, 4)} points as input costs eased.",
          "The chief executive said the company would keep investing in automation.",
          "Analysts had expected slightly lower figures; the shares rose in early trading.",
          "The board proposed an unchanged dividend and a new buy-back programme.",
          "Guidance for next year assumes stable demand in Europe and North America."]
    zh = [f"{company}今日公布{year}财年业绩。",
          f"营业收入增至 {revenue} 亿美元，主要受亚洲市场需求和服务业务增长推动。",
          f"由于原材料成本回落，营业利润率提升 {r.randint(1, 4)} 个百分点。",
          "首席执行官表示，公司将继续投资自动化。",
          "分析师此前预期的数据略低，公司股价早盘上涨。",
          "董事会建议维持股息不变，并推出新的股票回购计划。",
          "明年的业绩指引假设欧洲和北美需求保持稳定。"]
    sentences = zh if a.zh else en
    return " ".join(r.choice(sentences) for _ in range(40))


def _fail(message: str) -> Callable[[], None]:
    def run() -> None:
        raise ToolError(message)

    return run


def _const(value):
    return lambda: value


def _customer(a: SimAgent) -> tuple[str, str]:
    name = a.pick(list(CUSTOMERS_EN), list(CUSTOMERS_ZH))
    return name, f"C-{a.rng.randint(10000, 99999)}"


def _order_id(a: SimAgent) -> str:
    return f"O-{a.rng.randint(2024000, 2024999)}"


def _polite_end(a: SimAgent) -> None:
    if a.rng.random() < 0.6:
        a.user(a.rng.choice(["Thanks!", "Great, thank you.", "Perfect, that's all."]),
               a.rng.choice(["谢谢！", "好的，谢谢。", "可以了，谢谢你。"]), think=2.0)
        a.reply(a.rng.choice(["You're welcome, have a good day.", "Glad I could help."]),
                a.rng.choice(["不客气，祝您愉快。", "很高兴能帮到您。"]))


# -- looping scenarios ------------------------------------------------------------------------
def image_inspection(a: SimAgent, p: Plan, ledger: Ledger) -> None:
    r = a.rng
    width, height = r.choice([(1024, 768), (1280, 960), (1600, 1200), (2048, 1536)])
    scale = 0.25
    image = f"IMG-{r.randint(100000, 999999)}"
    tracking = f"SF{r.randint(10**11, 10**12 - 1)}"
    hint = ("Coordinates returned by detect_objects can be passed to image_crop directly."
            if p.faulty else
            "detect_objects returns thumbnail coordinates: divide by thumbnail_scale and clamp "
            "to the image size before calling image_crop.")
    hint_zh = ("detect_objects 返回的坐标可以直接传给 image_crop。" if p.faulty else
               "detect_objects 返回的是缩略图坐标：先除以 thumbnail_scale，再限制在图片尺寸内，"
               "然后调用 image_crop。")
    _start(a, a.t(
        f"You are ParcelEye ({p.prompt_version}), the multimodal inspection agent of {p.tenant}'s "
        "returns desk. You receive delivery photos, locate damage, crop regions of interest with "
        "image_crop(x, y, width, height) in full-resolution pixels, classify damage and read "
        "shipping labels with ocr. Report damage type, severity and confidence; never guess "
        f"label text you could not read. {hint}",
        f"你是 {p.tenant} 退货中心的多模态质检助手 ParcelEye（{p.prompt_version}）。"
        "你会收到配送照片，需要定位破损、用 image_crop(x, y, width, height)（原图像素坐标）"
        "裁剪关注区域、判断破损类型，并用 ocr 读取快递面单。"
        f"报告破损类型、严重程度和置信度；读不清的面单内容不要猜。{hint_zh}"),
        ["load_image", "detect_objects", "image_crop", "classify_damage", "ocr"])
    a.set_vars(image_id=image, channel=p.channel)
    a.user(f"Please inspect delivery photo {image}: the customer says the box arrived crushed. "
           "Check the lower-right corner.",
           f"请检查配送照片 {image}：客户说箱子到的时候被压坏了，看一下右下角。", think=0.3)
    a.tool("load_image", {"image_id": image},
           _const({"image_id": image, "width": width, "height": height, "format": "jpeg",
                   "thumbnail_scale": scale}),
           thought=("Loading the delivery photo.", "先加载这张配送照片。"))
    a.set_vars(image={"id": image, "width": width, "height": height})
    tw, th = int(width * scale), int(height * scale)
    box = [int(tw * 0.62), int(th * 0.55), int(tw * 0.3), int(th * 0.38)]
    label = [int(tw * 0.08), int(th * 0.7), int(tw * 0.34), int(th * 0.22)]
    a.tool("detect_objects", {"image_id": image, "labels": ["box", "shipping_label", "tape"]},
           _const({"space": "thumbnail", "objects": [
               {"label": "box", "bbox": box, "score": round(r.uniform(0.9, 0.99), 2)},
               {"label": "shipping_label", "bbox": label, "score": round(r.uniform(0.8, 0.97), 2)},
               {"label": "tape", "bbox": [box[0] + 4, box[1] + 2, 20, 6], "score": 0.71}]}),
           thought=("Finding the box and the label in the photo.", "先找出箱子和面单的位置。"))
    corner = [int(v / scale) for v in box]
    crop = f"{image}-c1"
    a.tool("image_crop", {"image_id": image, "x": corner[0], "y": corner[1],
                          "width": corner[2], "height": corner[3]},
           _const({"crop_id": crop, "size": corner[2:]}),
           thought=("Cropping the lower-right corner at full resolution.",
                    "按原图分辨率裁剪右下角。"))
    severity = r.choice(["minor", "moderate", "severe"])
    severity_zh = {"minor": "轻微", "moderate": "中等", "severe": "严重"}[severity]
    confidence = round(r.uniform(0.78, 0.96), 2)
    a.tool("classify_damage", {"crop_id": crop},
           _const({"damage": "crushed corner", "severity": severity, "confidence": confidence}),
           thought=("Classifying the damage.", "判断破损类型。"))
    a.set_vars(damage={"type": "crushed corner", "severity": severity, "confidence": confidence})
    a.remember(f"Photo {image}: crushed lower-right corner, {severity}, confidence {confidence}",
               f"照片 {image}：右下角压损，{severity_zh}，置信度 {confidence}", importance=0.7)
    a.reply(f"The lower-right corner is crushed ({severity}, confidence {confidence:.0%}). "
            "The packaging took a vertical impact; the contents may be affected.",
            f"右下角有压损（{severity_zh}，置信度 {confidence:.0%}），外包装受到过垂直挤压，"
            "内部商品可能受影响。")
    a.user("Can you also read the shipping label? I need the tracking number.",
           "能再读一下快递面单吗？我需要运单号。")
    good = [int(v / scale) for v in label]
    good[2] = min(good[2], width - good[0])
    good[3] = min(good[3], height - good[1])
    if p.loop:
        # The agent scales the thumbnail box twice: rows end far beyond the image.
        bad = [v * 2 for v in good]
        bad[1] = max(bad[1], height - bad[3] // 2)
        args = {"image_id": image, "x": bad[0], "y": bad[1], "width": bad[2], "height": bad[3]}
        error = (f"invalid slice: rows {bad[1]}:{bad[1] + bad[3]}, cols {bad[0]}:"
                 f"{bad[0] + bad[2]} out of range for a {width}x{height} image")
        flagged = a.repeat_until_flagged(lambda: a.tool(
            "image_crop", args, _fail(error),
            thought=("Cropping the shipping label.", "裁剪快递面单区域。")), limit=40)
        if flagged is None:
            a.reply("I could not crop the shipping label; please check the photo manually.",
                    "面单区域裁剪失败，请人工查看照片。")
            return
        a.tool("load_image", {"image_id": image},
               _const({"image_id": image, "width": width, "height": height, "format": "jpeg",
                       "thumbnail_scale": scale}),
               thought=("The context was reset. Re-reading the image size before cropping.",
                        "上下文已重置。裁剪前先重新确认图片尺寸。"))
    crop2 = f"{image}-c2"
    a.tool("image_crop", {"image_id": image, "x": good[0], "y": good[1], "width": good[2],
                          "height": good[3]},
           _const({"crop_id": crop2, "size": good[2:]}),
           thought=("Cropping the label inside the image bounds.", "在图片范围内裁剪面单。"))
    a.tool("ocr", {"crop_id": crop2, "lang": "zh" if a.zh else "en"},
           _const({"text": f"{tracking} · {a.t('Shanghai Pudong DC', '上海浦东分拨中心')}",
                   "confidence": round(r.uniform(0.9, 0.99), 2)}),
           thought=("Reading the label.", "识别面单文字。"))
    a.set_vars(tracking_number=tracking)
    a.reply(f"The tracking number on the label is {tracking} (Shanghai Pudong DC). I attached "
            "the corner and label crops to the claim.",
            f"面单上的运单号是 {tracking}（上海浦东分拨中心）。"
            "我已把右下角和面单的裁剪图附到理赔单里。")
    _polite_end(a)


def customer_service(a: SimAgent, p: Plan, ledger: Ledger) -> None:
    r = a.rng
    name, customer = _customer(a)
    order = _order_id(a)
    sku, product_en, product_zh, _price, _pts = r.choice(PRODUCTS)
    days = r.randint(3, 9)
    rule = ("Treat every customer request as a new case and open a ticket for it."
            if p.faulty else
            "Before opening a ticket, look for the ticket id in the conversation and reuse it; "
            "use raise_priority and get_ticket for follow-ups.")
    rule_zh = ("把每个客户请求都当作新工单处理，并为它创建工单。" if p.faulty else
               "创建工单前先在对话中查找已有的工单号并复用；"
               "跟进请使用 raise_priority 和 get_ticket。")
    _start(a, a.t(
        f"You are the support agent of {p.tenant} ({p.prompt_version}). Be brief and friendly. "
        "Tools: lookup_order, create_ticket, raise_priority, get_ticket. " + rule,
        f"你是 {p.tenant} 的客服助手（{p.prompt_version}），回答简洁友好。"
        "可用工具：lookup_order、create_ticket、raise_priority、get_ticket。" + rule_zh),
        ["lookup_order", "create_ticket", "raise_priority", "get_ticket"])
    a.set_vars(customer_id=customer, order_id=order)
    a.user(f"Hi, I'm {name}. My order {order} ({product_en}) is {days} days late. What's going on?",
           f"你好，我是{name}。我的订单 {order}（{product_zh}）已经晚了 {days} 天，怎么回事？",
           think=0.3)
    carrier = a.pick(["UPS", "DHL", "FedEx"], ["顺丰速运", "中通快递", "京东物流"])
    street, new_street = r.sample(STREETS, 2)
    a.tool("lookup_order", {"order_id": order},
           _const({"order_id": order, "sku": sku, "status": "in_transit", "carrier": carrier,
                   "last_scan": a.t("Regional hub, 4 days ago", "区域分拨中心，4 天前"),
                   "ship_to": a.t(*street), "notify_by": "email"}),
           thought=("Looking the order up.", "先查一下订单。"))
    a.remember(f"{name} ({customer}): order {order} delayed {days} days, stuck at regional hub",
               f"{name}（{customer}）：订单 {order} 延误 {days} 天，卡在区域分拨中心",
               importance=0.6)
    # What the agent knows it stores, by key: a later address or preference replaces the earlier.
    address_key, notify_key = f"customer.{customer}.address", f"customer.{customer}.notify_by"
    a.remember(f"{name} ({customer}) delivery address: {street[0]}",
               f"{name}（{customer}）收货地址：{street[1]}", importance=0.8, key=address_key)
    a.remember(f"{name} ({customer}) wants updates by email",
               f"{name}（{customer}）希望通过邮件接收进度通知", importance=0.6, key=notify_key)
    tickets: list[str] = []

    def create(subject_en: str, subject_zh: str, extra: dict | None = None):
        ticket = f"T-{r.randint(100000, 999999)}"
        ref = a.ref()
        args = {"customer_id": customer, "order_id": order,
                "subject": a.t(subject_en, subject_zh), **(extra or {})}

        def run():
            ledger.apply(ref, "ticket_opened", a.s.id, ticket, 1)
            tickets.append(ticket)
            return {"ticket_id": ticket, "status": "open", "queue": "logistics"}

        return a.tool("create_ticket", args, run, side_effect=True,
                      compensation=("ticket.close", {"ref": ref, "ticket_id": ticket}),
                      thought=("Opening a ticket with logistics.", "给物流组创建工单。"))

    create("Delayed delivery", "配送延误")
    first = tickets[0]
    a.set_vars(ticket_id=first)
    a.reply(f"Sorry about that. Your parcel is stuck at the {carrier} regional hub. I opened "
            f"ticket {first} with our logistics team.",
            f"非常抱歉。您的包裹卡在{carrier}的区域分拨中心，"
            f"我已为您创建工单 {first}，物流组会跟进。")
    a.user(f"Please raise its priority, I need it before the weekend. And I've moved: please "
           f"deliver to {new_street[0]}.",
           f"麻烦把这个工单的优先级提高一下，我周末前必须收到。另外我搬家了，请改送到{new_street[1]}。")
    a.remember(f"{name} ({customer}) delivery address: {new_street[0]} (moved)",
               f"{name}（{customer}）收货地址：{new_street[1]}（已搬家）", importance=0.8,
               key=address_key)
    if p.loop:
        create("Urgent: delayed delivery", "加急：配送延误", {"priority": "high"})
        a.reply(f"Done: ticket {tickets[-1]} is marked high priority.",
                f"已处理：工单 {tickets[-1]} 已标记为高优先级。")
    else:
        a.tool("raise_priority", {"ticket_id": first, "priority": "high"},
               _const({"ticket_id": first, "priority": "high", "sla_hours": 24}),
               thought=(f"Raising the priority of {first}.", f"提高工单 {first} 的优先级。"))
        a.reply(f"Done: {first} is now high priority with a 24-hour response time.",
                f"已处理：工单 {first} 已提为高优先级，24 小时内响应。")
    a.user("Can you check the progress on it? And text me the updates, not email.",
           "帮我看看现在处理到哪一步了？以后进度请发短信，别发邮件了。")
    a.remember(f"{name} ({customer}) wants updates by text message, not email",
               f"{name}（{customer}）希望改用短信接收进度通知，不要邮件", importance=0.6,
               key=notify_key)
    if p.loop:
        subject = a.t("Delivery progress inquiry", "配送进度查询")
        args = {"customer_id": customer, "order_id": order, "subject": subject}
        error = (f"409 duplicate_ticket: order {order} already has open tickets "
                 f"{', '.join(tickets)}; update an existing ticket instead")
        flagged = a.repeat_until_flagged(lambda: a.tool(
            "create_ticket", args, _fail(error),
            thought=("Opening a ticket to track the progress.", "创建工单来跟踪进度。")))
        if flagged is None:
            a.reply("I'm having trouble with the ticket system; a colleague will get back to you.",
                    "工单系统出了点问题，稍后会有同事联系您。")
            return
    status = r.choice(["assigned", "investigating", "waiting_on_carrier"])
    status_zh = {"assigned": "已分配", "investigating": "调查中",
                 "waiting_on_carrier": "等待承运商回复"}[status]
    a.tool("get_ticket", {"ticket_id": first},
           _const({"ticket_id": first, "status": status, "owner": a.pick(["Lina", "Marco"],
                                                                         ["小林", "阿杰"]),
                   "updates": [a.t("Carrier contacted, re-routing requested",
                                   "已联系承运商，申请改派")]}),
           thought=(f"Checking ticket {first}.", f"查询工单 {first}。"))
    a.reply(f"Ticket {first} is {status.replace('_', ' ')}: we asked the carrier to re-route the "
            "parcel. You'll get an update within 24 hours.",
            f"工单 {first} 当前状态：{status_zh}。我们已要求承运商改派，24 小时内会通知您进展。")
    _polite_end(a)


def refund(a: SimAgent, p: Plan, ledger: Ledger) -> None:
    r = a.rng
    name, customer = _customer(a)
    order = _order_id(a)
    sku, product_en, product_zh, price, points = r.choice(PRODUCTS)
    captured = round(price - r.choice([10.0, 15.0, 20.0]), 2)  # paid with a coupon
    warehouse = r.choice(["SH-01", "SZ-02", "BJ-03"])
    _start(a, a.t(
        f"You are the returns agent of {p.tenant} ({p.prompt_version}). For an eligible return: "
        "deduct the loyalty points the order earned, reserve a replacement, then refund. "
        + ("Refund the list price of the item."
           if p.faulty else "Refund the captured amount from get_payment, never the list price."),
        f"你是 {p.tenant} 的退货助手（{p.prompt_version}）。符合条件的退货：先扣回订单获得的积分，"
        "再预留换货库存，最后退款。"
        + ("按商品标价退款。" if p.faulty else "按 get_payment 返回的实付金额退款，不要按标价。")),
        ["lookup_order", "check_return_policy", "get_payment", "deduct_points",
         "reserve_inventory", "issue_refund"])
    a.set_vars(customer_id=customer, order_id=order)
    a.user(f"Hello, {name} here. The {product_en} from order {order} arrived broken. I'd like a "
           "refund and a replacement.",
           f"你好，我是{name}。订单 {order} 的{product_zh}收到就是坏的，我要退款并换一个新的。",
           think=0.3)
    a.tool("lookup_order", {"order_id": order},
           _const({"order_id": order, "sku": sku, "list_price": price, "points_earned": points,
                   "delivered": True}),
           thought=("Looking the order up.", "查询订单。"))
    a.tool("check_return_policy", {"sku": sku, "reason": "damaged_on_arrival"},
           _const({"eligible": True, "window_days": 30, "replacement": True}),
           thought=("Checking the return policy.", "确认退货政策。"))
    a.remember(f"{name} returns {product_en} from {order}: damaged on arrival, eligible",
               f"{name} 退回订单 {order} 的{product_zh}：到货损坏，符合退货条件", importance=0.6)
    a.reply(f"Your return is eligible. I'll deduct the {points} points this order earned, "
            f"reserve a replacement and refund you. Shall I go ahead?",
            f"您的退货符合条件。我会扣回该订单获得的 {points} 积分，预留一台新的{product_zh}，"
            "然后为您退款。现在办理吗？")
    a.user("Yes, go ahead.", "好的，办理吧。")

    def transaction(amount: float):
        ref_points, ref_stock = a.ref(), a.ref()

        def deduct():
            ledger.apply(ref_points, "points_deducted", a.s.id, customer, points)
            return {"customer_id": customer, "deducted": points,
                    "balance": r.randint(200, 5000)}

        def reserve():
            ledger.apply(ref_stock, "stock_reserved", a.s.id, sku, 1)
            return {"sku": sku, "reserved": 1, "warehouse": warehouse,
                    "reservation": f"RSV-{r.randint(10000, 99999)}"}

        a.tool("deduct_points", {"customer_id": customer, "points": points,
                                 "reason": f"return {order}"}, deduct, side_effect=True,
               compensation=("points.restore", {"ref": ref_points, "customer_id": customer,
                                                "points": points}),
               thought=(f"Deducting the {points} points earned by {order}.",
                        f"扣回订单 {order} 获得的 {points} 积分。"))
        a.tool("reserve_inventory", {"sku": sku, "qty": 1, "warehouse": warehouse}, reserve,
               side_effect=True,
               compensation=("inventory.release", {"ref": ref_stock, "sku": sku, "qty": 1}),
               thought=("Reserving the replacement.", "预留换货库存。"))
        return amount

    if p.loop:
        transaction(price)
        error = (f"422 amount_mismatch: refund {price:.2f} exceeds the captured amount "
                 f"{captured:.2f} for {order}")
        flagged = a.repeat_until_flagged(lambda: a.tool(
            "issue_refund", {"order_id": order, "amount": price, "currency": "CNY" if a.zh
                             else "USD"}, _fail(error),
            thought=("Issuing the refund.", "发起退款。")))
        if flagged is None:
            a.reply("The refund did not go through; a colleague will finish it manually.",
                    "退款没有成功，稍后会有同事人工处理。")
            return
        a.tool("get_payment", {"order_id": order},
               _const({"order_id": order, "captured": captured, "coupon": round(price - captured,
                                                                               2)}),
               thought=("The context was reset. Checking what was actually paid.",
                        "上下文已重置。先确认实际支付金额。"))
        transaction(captured)
    else:
        a.tool("get_payment", {"order_id": order},
               _const({"order_id": order, "captured": captured,
                       "coupon": round(price - captured, 2)}),
               thought=("Checking what was actually paid.", "确认实际支付金额。"))
        transaction(captured)
    refund_id = f"RF-{r.randint(100000, 999999)}"
    a.tool("issue_refund", {"order_id": order, "amount": captured,
                            "currency": "CNY" if a.zh else "USD"},
           _const({"refund_id": refund_id, "amount": captured, "status": "processing"}),
           thought=("Issuing the refund of the captured amount.", "按实付金额发起退款。"))
    a.set_vars(refund_id=refund_id, refund_amount=captured)
    a.reply(f"Done: refund {refund_id} of {captured:.2f} is on its way (3-5 business days), "
            f"{points} points were deducted and a replacement is reserved at {warehouse}.",
            f"已办理：退款 {refund_id}（{captured:.2f} 元）将在 3-5 个工作日内到账，"
            f"已扣回 {points} 积分，新商品已在 {warehouse} 仓预留。")
    _polite_end(a)


def finance(a: SimAgent, p: Plan, ledger: Ledger) -> None:
    r = a.rng
    invoice = f"INV-{r.randint(2024100, 2024999)}"
    client = a.pick(["Müller GmbH", "Rossi S.p.A.", "Dupont SA"],
                    ["慕勒有限公司", "罗西股份公司", "杜邦集团"])
    old_rate = round(r.uniform(1.05, 1.10), 4)
    new_rate = round(old_rate + r.choice([0.02, 0.03, 0.04]), 4)
    items = [{"item": a.pick(["Consulting", "Licence", "Support"],
                             ["咨询服务", "软件许可", "技术支持"]),
              "eur": r.choice([1200, 2500, 4800, 9600])} for _ in range(3)]
    total_eur = sum(i["eur"] for i in items)
    _start(a, a.t(
        f"You are the billing agent of {p.tenant} ({p.prompt_version}). Invoices are issued in "
        "EUR and booked in USD. "
        + ("Fix the exchange rate once at the start of the task and reuse it."
           if p.faulty else "Use the most recent exchange rate the user or treasury gave; "
                            "recall memories before booking."),
        f"你是 {p.tenant} 的开票助手（{p.prompt_version}）。发票以欧元开具、以美元记账。"
        + ("任务开始时确定一次汇率，之后一直沿用。" if p.faulty
           else "使用用户或资金部给出的最新汇率，记账前先检索记忆。")),
        ["get_fx_rate", "calc_line_items", "post_invoice"])
    a.set_vars(invoice_id=invoice, client=client)
    a.user(f"Prepare invoice {invoice} for {client}: three line items in EUR, booked in USD at "
           "today's rate.",
           f"给{client}准备发票 {invoice}：三个欧元明细项，按今天的汇率折成美元记账。", think=0.3)
    a.tool("get_fx_rate", {"pair": "EUR/USD"},
           _const({"pair": "EUR/USD", "rate": old_rate, "source": "ECB reference"}),
           thought=("Getting today's EUR/USD rate.", "获取今天的欧元兑美元汇率。"))
    a.set_vars(fx_rate=old_rate)
    # The rate is a keyed fact: the treasury's later rate replaces this one (by key, not guessed).
    a.remember(f"EUR/USD exchange rate for invoice {invoice}: {old_rate}",
               f"发票 {invoice} 的欧元兑美元汇率：{old_rate}", importance=0.9, key=FX_KEY,
               kind="fx_rate")
    a.tool("calc_line_items", {"invoice_id": invoice, "items": items, "currency": "EUR"},
           _const({"total_eur": total_eur, "vat_eur": round(total_eur * 0.19, 2)}),
           thought=("Totalling the line items.", "汇总明细金额。"))
    a.reply(f"Draft ready: {total_eur:,} EUR, about {total_eur * old_rate:,.2f} USD at "
            f"{old_rate}.",
            f"草稿已生成：{total_eur:,} 欧元，"
            f"按 {old_rate} 约合 {total_eur * old_rate:,.2f} 美元。")
    a.user(f"Treasury just updated the rate: EUR/USD is {new_rate} for all invoices from today.",
           f"资金部刚更新了汇率：今天起所有发票的欧元兑美元汇率为 {new_rate}。")
    a.remember(f"EUR/USD exchange rate for invoice {invoice}: {new_rate} (treasury update)",
               f"发票 {invoice} 的欧元兑美元汇率：{new_rate}（资金部更新）", importance=0.9,
               key=FX_KEY, kind="fx_rate")
    tolerance = (f"rate {old_rate:.4f} is outside the 0.5% tolerance of the treasury quote "
                 f"{new_rate:.4f}; re-quote before booking")
    if p.loop:
        args = {"invoice_id": invoice, "amount_eur": total_eur, "rate": old_rate,
                "amount_usd": round(total_eur * old_rate, 2)}
        flagged = a.repeat_until_flagged(lambda: a.tool(
            "post_invoice", args, _fail(tolerance),
            thought=(f"Booking at the rate fixed for this task ({old_rate}).",
                     f"按本任务确定的汇率 {old_rate} 记账。")))
        if flagged is None:
            a.reply("Booking failed; please book the invoice manually.", "记账失败，请人工处理。")
            return
    a.recall("which EUR/USD exchange rate applies to this invoice?",
             "这张发票适用哪个欧元兑美元汇率？")
    a.set_vars(fx_rate=new_rate)
    usd = round(total_eur * new_rate, 2)
    a.tool("post_invoice", {"invoice_id": invoice, "amount_eur": total_eur, "rate": new_rate,
                            "amount_usd": usd},
           _const({"invoice_id": invoice, "status": "booked", "amount_usd": usd}),
           thought=(f"Booking at the treasury rate {new_rate}.", f"按资金部汇率 {new_rate} 记账。"))
    a.reply(f"Invoice {invoice} is booked: {total_eur:,} EUR = {usd:,.2f} USD at {new_rate}.",
            f"发票 {invoice} 已记账：{total_eur:,} 欧元 = {usd:,.2f} 美元（汇率 {new_rate}）。")
    _polite_end(a)


def research(a: SimAgent, p: Plan, ledger: Ledger) -> None:
    r = a.rng
    company = a.pick(["Northwind Robotics", "Helios Batteries", "Quanta Foods"],
                     ["北风机器人", "赫利俄斯电池", "量子食品"])
    year = r.choice([2023, 2024])
    slug = f"{r.randint(1000, 9999)}"
    question = a.t(f"{company} {year} annual revenue", f"{company} {year} 年 营业收入")
    _start(a, a.t(
        f"You are a research assistant ({p.prompt_version}). Answer with a figure and cite a "
        "primary source. Tools: web_search(query), fetch(url). "
        + ("If a source fails, search again and retry it." if p.faulty
           else "If a source fails twice, switch to another source (investor relations, filings)."),
        f"你是研究助手（{p.prompt_version}）。回答要给出数字并引用一手来源。"
        "工具：web_search(query)、fetch(url)。"
        + ("来源打不开时，重新搜索再试。" if p.faulty
           else "同一来源失败两次后，换用其他来源（投资者关系页面、公告）。")),
        ["web_search", "fetch"])
    a.user(f"What was {company}'s revenue in {year}? Please cite the source.",
           f"{company} {year} 年的营业收入是多少？请注明出处。", think=0.3)
    results = [
        {"title": a.t(f"{company} reports {year} results", f"{company}发布{year}年业绩"),
         "url": f"https://news.example.com/{slug}/results"},
        {"title": a.t(f"{company} annual report {year}", f"{company}{year}年年度报告"),
         "url": f"https://ir.example.com/{slug}/annual-report-{year}.pdf"},
    ]
    a.tool("web_search", {"query": question}, _const({"results": results}),
           thought=("Searching for the figure.", "先搜索这个数据。"))
    revenue = round(r.uniform(0.8, 40.0), 1)
    body = _article(a, company, year, revenue)
    a.tool("fetch", {"url": results[0]["url"]},
           _const({"status": 200, "text": body, "note": "secondary source"}),
           thought=("Reading the news article.", "先看新闻报道。"))
    paywalled = f"https://www.ft-example.com/content/{slug}-{year}"
    query2 = a.t(f"{company} {year} revenue primary source", f"{company} {year} 营收 一手来源")
    search2 = {"results": [{"title": a.t("Full-year figures", "全年数据"), "url": paywalled}]}
    if p.loop:
        forbidden = f"403 Forbidden: {paywalled} requires a subscription"
        cycle = [0]

        def attempt():
            # ABAB between search and fetch for three rounds, then the fetch alone is hammered.
            if cycle[0] < 3:
                cycle[0] += 1
                a.tool("web_search", {"query": query2}, _const(search2),
                       thought=("Searching for a primary source.", "搜索一手来源。"))
            a.tool("fetch", {"url": paywalled}, _fail(forbidden),
                   thought=("Opening the primary source.", "打开一手来源。"))

        flagged = a.repeat_until_flagged(attempt, limit=10)
        if flagged is None:
            a.reply(f"I could only find a secondary source: revenue of ${revenue} billion.",
                    f"只找到二手来源：营业收入约 {revenue} 亿美元。")
            return
    a.tool("fetch", {"url": results[1]["url"]},
           _const({"status": 200, "text": a.t(f"Consolidated revenue: ${revenue} billion",
                                               f"合并营业收入：{revenue} 亿美元"),
                   "page": r.randint(4, 40)}),
           thought=("Reading the annual report (investor relations).",
                    "查阅年度报告（投资者关系页面）。"))
    a.remember(f"{company} revenue {year}: ${revenue}B (annual report)",
               f"{company} {year} 年营收：{revenue} 亿美元（年报）", importance=0.8)
    a.reply(f"{company}'s {year} revenue was ${revenue} billion, per its annual report "
            f"({results[1]['url']}).",
            f"{company} {year} 年营业收入为 {revenue} 亿美元，"
            f"来源：公司年度报告（{results[1]['url']}）。")
    _polite_end(a)


# -- healthy scenarios ------------------------------------------------------------------------
def pagination(a: SimAgent, p: Plan, ledger: Ledger) -> None:
    r = a.rng
    pages = r.randint(3, 7)
    size = 50
    total = (pages - 1) * size + r.randint(1, size)
    _start(a, a.t(f"You are the operations assistant of {p.tenant} ({p.prompt_version}). Page "
                "through list endpoints until next_page is null.",
                f"你是 {p.tenant} 的运营助手（{p.prompt_version}）。"
                "分页调用列表接口，直到 next_page 为空。"),
            ["list_orders", "export_csv"])
    a.user("Export all orders returned last week as a CSV.", "把上周所有退货订单导出成 CSV。",
           think=0.3)
    since = f"2024-{r.randint(1, 12):02d}-{r.randint(1, 21):02d}"
    a.set_vars(filter={"status": "returned", "since": since})
    for page in range(1, pages + 1):
        count = size if page < pages else total - (pages - 1) * size
        first = r.randint(2024000, 2024999)
        a.tool("list_orders", {"status": "returned", "since": since, "page": page,
                               "page_size": size},
               _const({"page": page, "orders": [f"O-{first + i}" for i in range(min(count, 5))],
                       "count": count, "next_page": page + 1 if page < pages else None}),
               thought=(f"Fetching page {page}.", f"获取第 {page} 页。"))
        a.set_vars(pages_read=page)
    a.tool("export_csv", {"rows": total, "columns": ["order_id", "sku", "reason", "amount"]},
           _const({"file": f"returns-{since}.csv", "rows": total}),
           thought=("Writing the CSV.", "生成 CSV 文件。"))
    a.remember(f"User wants weekly returned-order exports as CSV ({total} rows last time)",
               f"用户需要每周导出退货订单 CSV（上次 {total} 行）", importance=0.5)
    a.reply(f"Exported {total} returned orders from {pages} pages to returns-{since}.csv.",
            f"已从 {pages} 页数据中导出 {total} 条退货订单到 returns-{since}.csv。")
    _polite_end(a)


def job_polling(a: SimAgent, p: Plan, ledger: Ledger) -> None:
    r = a.rng
    region = a.pick(["East", "West", "North"], ["华东", "华南", "华北"])
    job = f"J-{r.randint(100000, 999999)}"
    _start(a, a.t(f"You are the reporting assistant of {p.tenant} ({p.prompt_version}). Long "
                "reports run as jobs: submit, poll get_job until done, then download.",
                f"你是 {p.tenant} 的报表助手（{p.prompt_version}）。长报表以任务方式运行：提交、"
                "轮询 get_job 直到完成，然后下载。"),
            ["submit_report_job", "get_job", "download_report"])
    a.user(f"Generate the Q3 sales report for region {region}.",
           f"生成{region}区第三季度销售报表。", think=0.3)
    a.tool("submit_report_job", {"report": "sales_q3", "region": region},
           _const({"job_id": job, "state": "queued"}),
           thought=("Submitting the report job.", "提交报表任务。"))
    a.set_vars(job_id=job)
    progress = 0
    while progress < 100:
        progress = min(100, progress + r.randint(12, 35))
        state = "done" if progress == 100 else "running"
        a.tool("get_job", {"job_id": job},
               _const({"job_id": job, "state": state, "progress": progress,
                       "rows_processed": progress * 1371}),
               thought=("Checking the job.", "查看任务进度。"))
        a.set_vars(job_progress=progress)
    a.tool("download_report", {"job_id": job},
           _const({"url": f"https://reports.example.com/{job}.xlsx",
                   "size_kb": r.randint(80, 900)}),
           thought=("Downloading the report.", "下载报表。"))
    a.reply(f"The Q3 report for {region} is ready: https://reports.example.com/{job}.xlsx",
            f"{region}区第三季度报表已生成：https://reports.example.com/{job}.xlsx")
    _polite_end(a)


def transient_retry(a: SimAgent, p: Plan, ledger: Ledger) -> None:
    r = a.rng
    order = _order_id(a)
    _start(a, a.t(f"You are the delivery assistant of {p.tenant} ({p.prompt_version}). On a 5xx or "
                "429 error, wait and retry once or twice.",
                f"你是 {p.tenant} 的配送助手（{p.prompt_version}）。"
                "遇到 5xx 或 429 错误时稍等后重试一两次。"),
            ["track_shipment", "subscribe_sms"])
    a.user(f"Where is my parcel? Order {order}.", f"我的包裹到哪了？订单号 {order}。", think=0.3)
    failures = r.choice([1, 1, 2])
    error = r.choice(["HTTP 503: upstream timeout", "HTTP 429: rate limited, retry after 2s",
                      "HTTP 502: bad gateway"])
    for _ in range(failures):
        a.tool("track_shipment", {"order_id": order}, _fail(error),
               thought=("Tracking the parcel.", "查询物流。"))
    city = a.pick(["Hamburg", "Lyon", "Denver"], ["杭州", "成都", "武汉"])
    a.tool("track_shipment", {"order_id": order},
           _const({"order_id": order, "status": "out_for_delivery", "city": city,
                   "eta": "today 18:00"}),
           thought=("Retrying after the transient error.", "临时错误，重试一次。"))
    a.set_vars(shipment_status="out_for_delivery")
    a.reply(f"Your parcel is out for delivery in {city} and should arrive today by 18:00.",
            f"您的包裹正在{city}派送中，预计今天 18:00 前送达。")
    if r.random() < 0.5:
        a.user("Can you send me an SMS when it's delivered?", "送达时能给我发条短信吗？")
        a.tool("subscribe_sms", {"order_id": order, "event": "delivered"},
               _const({"subscribed": True}),
               thought=("Subscribing to the delivery SMS.", "订阅送达短信通知。"))
        a.reply("Done, you'll get an SMS on delivery.", "已为您订阅，送达时会发短信通知。")
    _polite_end(a)


# -- registry ---------------------------------------------------------------------------------
SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("image_inspection", "multimodal inspection: invalid slice, same coordinates",
             (Version("mm-v3", 0.45, 0.85, faulty=True), Version("mm-v4", 0.55, 0.08)),
             image_inspection),
    Scenario("customer_service", "support tickets: new ticket for every follow-up",
             (Version("cs-v7", 0.6, 0.04), Version("cs-v8", 0.4, 0.9, faulty=True)),
             customer_service),
    Scenario("refund", "refund with points and stock side effects, wrong amount retried",
             (Version("rf-v2", 0.4, 0.85, faulty=True), Version("rf-v3", 0.6, 0.08)),
             refund, snapshots="turn"),
    Scenario("finance", "exchange rate fixed early, contradicted later",
             (Version("fx-v5", 0.6, 0.04), Version("fx-v6", 0.4, 0.9, faulty=True)),
             finance),
    Scenario("research", "search/fetch oscillation on a paywalled source",
             (Version("rs-v1", 0.45, 0.8, faulty=True), Version("rs-v2", 0.55, 0.1)),
             research),
    Scenario("pagination", "healthy: paging through a list endpoint",
             (Version("pg-v2", 1.0, 0.0),), pagination),
    Scenario("job_polling", "healthy: polling a job that progresses",
             (Version("jp-v1", 0.5, 0.0), Version("jp-v2", 0.5, 0.0)), job_polling),
    Scenario("transient_retry", "healthy: a transient error, then success",
             (Version("tr-v4", 1.0, 0.0),), transient_retry),
)}

LOOPING = tuple(name for name, s in SCENARIOS.items() if s.can_loop)
HEALTHY = tuple(name for name, s in SCENARIOS.items() if not s.can_loop)

COMPENSATIONS = {"ticket.close": "customer_service", "points.restore": "refund",
                 "inventory.release": "refund"}
"""Compensation handler name -> the scenario whose side effects it undoes."""

"""The proxy's configuration: one home, a YAML file with environment overrides.

Precedence, highest first: command-line flags, ``DRAFTGATE_*`` environment
variables (nested keys joined by ``__``, e.g. ``DRAFTGATE_DEFAULT_POLICY__MARGIN``),
the YAML file, then the defaults below, which work for a quick start.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
from pathlib import Path
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from draftgate.policy.calibration import METHOD_DEFAULTS
from draftgate.policy.copying import lookup_bounds
from draftgate.policy.kinds import KINDS
from draftgate.policy.structure.priors import StructurePriors
from draftgate.policy.structure.sampling import SamplingDefaults
from draftgate.proxy.upstream import tls_context

log = logging.getLogger("draftgate.config")


class ConfigError(ValueError):
    """Configuration that cannot start the proxy; the message names the key."""


class SpeculationConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    method: str = Field("draft_model", description="the method of the pool's --speculative-config: draft_model "
                                                   "(adds draft prefill), eagle, eagle3, mtp (priced by the law with "
                                                   "their own cost and alignment), ngram, suffix (priced by what the "
                                                   "request holds to copy)")
    gamma: int | None = Field(None, ge=1, le=64, description="num_speculative_tokens of the pool; read from the "
                                                             "pool's /metrics when omitted, and the pool's word wins "
                                                             "over a configured value it contradicts (logged, and "
                                                             "shown in explain)")
    draft_cost: float | None = Field(None, ge=0.0, description="d; calibration's value when omitted")
    draft_prefill_ratio: float = Field(0.15, ge=0.0, description="draft prefill relative to the target's")
    num_speculative_tokens_per_batch_size: list[tuple[int, int, int]] = Field(
        default_factory=list,
        description="vLLM's dynamic K, as the pool's --speculative-config sets it: [[lo, hi, K], ...], K for "
                    "lo..hi running requests (0: no speculation there); the pool is priced at the depth it runs "
                    "at the batch the request would join")

    @field_validator("method")
    @classmethod
    def _known(cls, method: str) -> str:
        if method not in METHOD_DEFAULTS:
            raise ValueError(f"{method!r} is no drafting method vLLM runs that draftgate prices; the methods are "
                             + ", ".join(sorted(METHOD_DEFAULTS)))
        return method

    @field_validator("num_speculative_tokens_per_batch_size")
    @classmethod
    def _ranges(cls, table: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
        for lo, hi, k in table:
            if not 1 <= lo <= hi or not 0 <= k <= 64:
                raise ValueError(f"[{lo}, {hi}, {k}]: each entry is [lo, hi, K] with 1 <= lo <= hi and 0 <= K <= 64")
        return table

    prompt_lookup_min: int | None = Field(None, ge=1, description="ngram: as the pool's --speculative-config "
                                                                  "sets it (vLLM: 5 when neither bound is set)")
    prompt_lookup_max: int | None = Field(None, ge=1, description="ngram: as the pool's --speculative-config sets it")

    @model_validator(mode="after")
    def _lookup_bounds(self) -> SpeculationConfig:
        low, high = self.lookup
        if low > high:
            raise ValueError(f"prompt_lookup_min ({low}) must not exceed prompt_lookup_max ({high})")
        return self

    @property
    def lookup(self) -> tuple[int, int]:
        """ngram's bounds as vLLM resolves them (``copying.lookup_bounds``)."""
        return lookup_bounds(self.prompt_lookup_min, self.prompt_lookup_max)


class CandidatePool(BaseModel):
    """A pool configuration the fleet plan may recommend."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$", description="as the plan names it")
    speculation: SpeculationConfig | None = Field(None, description="how it speculates; omitted: plain")
    max_num_seqs: int = Field(1024, ge=1, description="per replica")
    max_num_batched_tokens: int = Field(8192, ge=1, description="per replica, as vLLM's --max-num-batched-tokens")

    @model_validator(mode="after")
    def _depth_given(self) -> CandidatePool:
        if self.speculation is not None and self.speculation.gamma is None:
            raise ValueError(f"candidate {self.name}: speculation.gamma is required (a candidate has no pool yet "
                             "to read its depth from)")
        return self


class PoolConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$",
                      description="the route: x-draftgate-route on answers, the pool label on metrics")
    urls: list[str] = Field(min_length=1, description="replica base URLs (http://host:port)")
    dns_refresh_seconds: float = Field(0.0, ge=0.0, description="re-resolve hostnames (headless Service); 0 = off")
    speculation: SpeculationConfig | None = Field(None, description="how the pool speculates; omitted: a plain pool")
    max_num_seqs: int = Field(256, ge=1, description="per replica, as the server was started")
    max_num_batched_tokens: int = Field(8192, ge=1, description="per replica, as the server was started "
                                                               "(--max-num-batched-tokens): the fleet plan's "
                                                               "prefill chunk")
    sampling_defaults: SamplingDefaults | None = Field(
        None, description="what the pool's server applies when a client omits a setting (the model's generation "
                          "config); unset: the model family's where draftgate knows it (Qwen3: temperature 0.6, "
                          "top_p 0.95, top_k 20), else vLLM's own (temperature 1)")
    api_key: SecretStr | None = Field(None, description="sent upstream instead of the client's key")
    per_request_metrics: bool = Field(
        True, description="the server runs with --per-request-spec-decode-metrics (else tau comes from counters)"
    )

    @field_validator("urls")
    @classmethod
    def _http_urls(cls, urls: list[str]) -> list[str]:
        """Server base URLs, checked here: a typo must stop startup, not fail every request."""
        for url in urls:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"{url!r} is not an http(s) URL with a host")
            try:
                parts.port
            except ValueError:
                raise ValueError(f"{url!r} has a port outside 0-65535") from None
            if parts.username is not None or parts.password is not None:
                raise ValueError(f"{url!r} carries credentials: give the pool's key as api_key")
            path = parts.path.rstrip("/")
            if path or parts.query or parts.fragment:
                # the usual slip: an OpenAI base_url, which ends in /v1, where the server's is wanted
                hint = "; the proxy adds /v1 itself" if path == "/v1" else ""
                raise ValueError(
                    f"{url!r}: give the server's base URL, scheme://host:port, without a path or query{hint}")
        return [u.rstrip("/") for u in urls]

    @model_validator(mode="after")
    def _resolvable(self) -> PoolConfig:
        if self.dns_refresh_seconds > 0 and any(u.startswith("https://") for u in self.urls):
            # replicas are then reached by address, and a certificate names the host
            raise ValueError("dns_refresh_seconds needs http:// URLs: replicas found by DNS are reached by "
                             "address, which an https certificate does not name")
        return self


class ModelPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["auto", "always_on", "always_off"] = Field(
        "auto", description="auto: the gate decides; always_on / always_off: a speculation / plain pool, "
                            "except where vLLM would not speculate (then plain)")
    margin: float = Field(0.0, ge=0.0, le=0.9, description="speculation must cost this fraction less than plain")
    hysteresis: float = Field(0.03, ge=0.0, le=1.0, description="a request shape leaves the pool it last went to "
                                                              "only for one this fraction cheaper: routes do not "
                                                              "flip-flop on noise")
    tpot_target_ms: float | None = Field(
        None, gt=0.0, description="time per output token a request should see; it goes to the pool that costs "
                                  "less unless that pool would break this and another would not")
    ttft_target_ms: float | None = Field(
        None, gt=0.0, description="time to first token, the same way (the gate predicts prefill and a first step; "
                                  "a pool with no room takes no request)")
    objective: Literal["cost", "latency"] = Field(
        "cost", description="cost: the fewest busy GPU-seconds a request causes; latency: the fastest tokens, "
                            "for operators who speculate to make answers faster")
    gpu_budget_ms_per_token: float | None = Field(
        None, gt=0.0, description="with objective latency: the most GPU time a request may cause per output token")
    latency_percentile: float = Field(
        99.0, gt=0.0, le=100.0, description="the percentile the targets are meant at, to read them against the "
                                            "dashboard's latency histograms; the gate holds each request's "
                                            "predicted mean")
    fleet_objective: Literal["capacity", "cost"] = Field(
        "capacity", description="what the fleet plan (which pool serves each kind of request, and the fleet it "
                                "recommends) makes best: capacity, the most traffic within the latency targets, for "
                                "a fixed fleet; cost, the fewest busy GPU-seconds per token, for a fleet that scales "
                                "with load")


class RecordTraffic(BaseModel):
    """Where the proxy writes the requests it serves, as ``draftgate evaluate --traffic`` replays them."""

    model_config = ConfigDict(extra="forbid")

    path: Path = Field(description="the file the requests are appended to, one JSON line each (docs/traffic.md)")
    sample: float = Field(1.0, gt=0.0, le=1.0, description="share of sessions (and lone requests) recorded; a "
                                                           "session is recorded whole or not at all")
    redact: bool = Field(False, description="keep only lengths and structure: every text is replaced by filler of "
                                            "its length, tool names and schemas kept")


class ApiKey(BaseModel):
    """A client key, and what it may do: a bare string in ``api_keys`` is a key with
    every default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: SecretStr = Field(description="the key, sent as Authorization: Bearer (or Anthropic's x-api-key)")
    label: str = Field("", max_length=64, pattern=r"^[A-Za-z0-9_.:-]*$",
                       description="names the key's requests on the metrics (the key label) and in the request "
                                   "log; empty: unlabelled")
    mode: Literal["auto", "always_on", "always_off"] | None = Field(
        None, description="the key's requests are routed so, as a model's mode; unset: the model's policy")
    allow_mode_header: bool = Field(
        False, description="the key may choose per request with x-draftgate-mode (or draftgate_mode in the body)")
    tpot_target_ms: float | None = Field(None, gt=0.0, description="the key's time-per-output-token target, in "
                                                                   "place of the model's")
    ttft_target_ms: float | None = Field(None, gt=0.0, description="the key's time-to-first-token target, in "
                                                                   "place of the model's")

    @model_validator(mode="before")
    @classmethod
    def _bare(cls, value: Any) -> Any:
        return {"key": value} if isinstance(value, (str, SecretStr)) else value

    @field_validator("key")
    @classmethod
    def _not_empty(cls, key: SecretStr) -> SecretStr:
        if not key.get_secret_value():
            raise ValueError("a key must not be empty")
        return key


class Timeouts(BaseModel):
    """How long the proxy waits on its clients and on its pools, in seconds."""

    model_config = ConfigDict(extra="forbid")

    client_header: float = Field(
        60.0, gt=0, description="a request's line and headers must all arrive within this of the connection's "
                                "opening (or of the request's first byte on a kept-alive one), or it is closed, "
                                "with a 408 if a head had begun; as nginx's client_header_timeout")
    client_body: float = Field(
        60.0, gt=0, description="the longest a request body may pause between two reads before the request is "
                                "answered 408; as nginx's client_body_timeout")
    keep_alive: float = Field(
        75.0, gt=0, description="how long a client's idle kept-alive connection stays open. Longer than any client "
                                "or load balancer in front keeps one (nginx 60 s, AWS ALB 60 s; Google's load "
                                "balancers 600 s: set 620 behind them), so that they, not the proxy, close it")
    connect: float = Field(2.0, gt=0, description="a replica's connection (TCP, and TLS) must open within this, "
                                                 "or the request fails over")
    first_byte: float = Field(
        300.0, gt=0, description="a stream's headers, its first event and each event after must come within this")
    answer: float = Field(
        3600.0, gt=0, description="a non-streamed answer must come within this. vLLM sends it whole once "
                                  "generated, so this bounds the whole generation: long reasoning takes minutes")
    queue: float = Field(2.0, ge=0.0, description="wait for capacity before shedding with 503")
    graceful_shutdown: float = Field(
        30.0, gt=0, description="after SIGTERM, how long requests in flight may run before they are cut. A "
                                "long reasoning stream needs minutes: the Helm chart sets 120")


class Health(BaseModel):
    """How replicas are checked, scraped and taken out of rotation."""

    model_config = ConfigDict(extra="forbid")

    interval: float = Field(1.0, gt=0, description="seconds between health checks of a replica")
    timeout: float = Field(2.0, gt=0, description="a health check unanswered this long has timed out")
    timeouts_to_fail: int = Field(
        3, ge=1, description="consecutive unanswered checks before a replica leaves rotation; a failed "
                             "connection or a non-200 answer takes it out at once")
    eject_after_failed_answers: int = Field(
        5, ge=0, description="answers in a row that fail (502/503/504, a dropped connection, no first byte in "
                             "time, a stream cut) before a replica leaves rotation though its /health is fine; 0: "
                             "never")
    eject_failure_share: float = Field(
        0.5, ge=0.0, le=1.0, description="a replica also leaves rotation when this share of at least "
                                         "ejection_window answers fail (a replica failing every other answer "
                                         "never fails eject_after_failed_answers in a row); 0: never")
    ejection_window: int = Field(20, ge=2, description="answers the failure share is taken over")
    ejection_seconds: float = Field(
        5.0, gt=0, description="how long the first ejection lasts; each further one without a good answer "
                               "between doubles it, up to 60 s")
    scrape_interval: float = Field(2.0, gt=0, description="seconds between reads of a replica's /metrics")


class SharedStore(BaseModel):
    """The store proxy replicas share what they learn through (Redis); unset: each proxy keeps its own."""

    model_config = ConfigDict(extra="forbid")

    address: str | None = Field(
        None, description="where proxy replicas share conversation affinity, what each request shape produced and "
                          "which replicas are ejected: redis://host:port/db (rediss:// for TLS); unset: each proxy "
                          "keeps its own, in memory")
    password: SecretStr | None = Field(None, description="the shared store's password (a Secret in the chart)")
    timeout: float = Field(
        0.05, gt=0.0, le=5.0, description="the longest a request waits on the shared store before it plans from "
                                          "this proxy's own state (counted as a fallback)")
    ttl_seconds: float = Field(
        86_400.0, gt=0.0, description="how long a shared conversation placement or shape lasts without being "
                                      "seen again")

    @field_validator("address")
    @classmethod
    def _redis_address(cls, value: str | None) -> str | None:
        if not value:  # unset, or set empty (compose passes DRAFTGATE_SHARED_STATE__ADDRESS through as "")
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("redis", "rediss") or not parts.hostname:
            raise ValueError(f"{value!r} is not a Redis address: redis://host:port/db, or rediss:// for TLS")
        if parts.password:
            raise ValueError("give the shared store's password as shared_state.password, not in the address")
        try:
            parts.port  # noqa: B018 - raises on a port that is not a number in range
            db = parts.path.strip("/")
            if db and not db.isdigit():
                raise ValueError
        except ValueError:
            raise ValueError(f"{value!r} is not a Redis address: its port and database are numbers") from None
        return value


class Planning(BaseModel):
    """The fleet plan: which pool serves each kind of request, and the fleet it would recommend."""

    model_config = ConfigDict(extra="forbid")

    routing: dict[str, str] = Field(
        default_factory=dict, description="kind of request (tool, tool_auto, json, reasoning, prose) -> the pool "
                                          "that serves it, as draftgate plan recommends; the proxy's own plan "
                                          "replaces it once it has seen traffic (plan.interval; 0 keeps it). "
                                          "Empty: each request goes where the gate prices it cheapest until then")
    assignment_interval: float = Field(
        5.0, gt=0.0, description="seconds between recomputations of each kind's shares: a pool nearing its limit "
                                 "spills the kind whose move costs least")
    interval: float = Field(
        300.0, ge=0.0, description="seconds between fleet plans from the proxy's own traffic: which pool each kind "
                                   "goes to, and the fleet it would recommend (draftgate_plan_*); 0: never")
    candidates: list[CandidatePool] = Field(
        default_factory=list, description="the pool configurations the recommended fleet is made of; empty: plain, "
                                          "a draft model at depth 2, 4 and 8 and at vLLM's dynamic K, an EAGLE-3 "
                                          "head at 3, ngram at 4, suffix decoding at 24")


class Tls(BaseModel):
    """TLS: the proxy's own certificate, and how it speaks to pools served over https."""

    model_config = ConfigDict(extra="forbid")

    ca_file: Path | None = Field(
        None, description="CA bundle that verifies pools served over https (a private CA); default: the "
                          "system's trust store")
    certfile: Path | None = Field(
        None, description="serve https with this certificate chain (PEM), as vLLM's --ssl-certfile; needs "
                          "keyfile")
    keyfile: Path | None = Field(None, description="the private key of certfile (PEM)")
    client_certfile: Path | None = Field(
        None, description="the client certificate (PEM) shown to https pools that require one (vLLM's "
                          "--ssl-cert-reqs 2, mutual TLS); needs client_keyfile")
    client_keyfile: Path | None = Field(None, description="the private key of client_certfile (PEM)")

    @field_validator("ca_file")
    @classmethod
    def _loadable_ca(cls, path: Path | None) -> Path | None:
        if path is not None:
            try:
                tls_context(str(path))
            except (OSError, ssl.SSLError) as exc:
                raise ValueError(f"{str(path)!r} is not a readable CA bundle: {exc}") from None
        return path

    @model_validator(mode="after")
    def _certificates(self) -> Tls:
        _usable_pair("certfile", self.certfile, "keyfile", self.keyfile, ssl.PROTOCOL_TLS_SERVER)
        _usable_pair("client_certfile", self.client_certfile, "client_keyfile", self.client_keyfile,
                     ssl.PROTOCOL_TLS_CLIENT)
        return self

    def upstream_context(self) -> ssl.SSLContext:
        """How the proxy speaks to https pools: whom it trusts, and what it shows if asked."""
        files = (self.ca_file, self.client_certfile, self.client_keyfile)
        return tls_context(*(None if f is None else str(f) for f in files))


class Cors(BaseModel):
    """CORS on the answers the proxy makes itself, as vLLM's own flags set it."""

    model_config = ConfigDict(extra="forbid")

    allowed_origins: list[str] = Field(
        default_factory=lambda: ["*"], description="CORS origins allowed on the answers the proxy makes itself, "
                                                   "as vLLM's --allowed-origins (pools' answers keep their own)")
    allow_credentials: bool = Field(False, description="CORS credentials, as vLLM's --allow-credentials")


class ProxySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DRAFTGATE_", env_nested_delimiter="__", extra="forbid")

    host: str = Field("127.0.0.1", description="address to listen on; 0.0.0.0 in a container")
    port: int = Field(8000, ge=0, le=65535, description="port to listen on")
    pools: list[PoolConfig] = Field(default_factory=list, description="the vLLM pools, speculating or plain, all "
                                                                      "serving the same target model")
    default_policy: ModelPolicy = Field(ModelPolicy(), description="mode and margin of models not in models")
    models: dict[str, ModelPolicy] = Field(default_factory=dict, description="per-model mode and margin")
    calibration_file: Path | None = Field(None, description="written by draftgate calibrate; until one exists "
                                                            "the documented defaults apply")
    structure_priors: StructurePriors = Field(StructurePriors(), description="the estimator's named guesses, for "
                                                                             "what a request does not say")
    learner_capacity: int = Field(4096, ge=1, description="request shapes whose observed output split is learned "
                                                          "(least recently seen forgotten first)")
    affinity_capacity: int = Field(100_000, ge=1, description="conversations whose pool and replica are remembered, "
                                                              "to keep their prefix cached (LRU)")
    gate_responses: bool = Field(
        True, description="gate POST /v1/responses as the chat completion it amounts to (but background "
                          "responses and follow-ups to a stored one); off, it is passed through to a plain pool "
                          "like the other /v1 routes")
    response_holders_capacity: int = Field(
        50_000, ge=1, description="stored /v1/responses whose replica is remembered; past it, the oldest is "
                                  "looked up again by asking each replica")
    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1024,
                                description="largest request body read, on any route (413 past it)")
    api_keys: list[ApiKey] = Field(
        default_factory=list, description="accepted client keys, each a string or {key, label, mode, "
                                          "allow_mode_header, tpot_target_ms, ttft_target_ms}; empty: open, and "
                                          "every request may set x-draftgate-mode")
    admin_token: SecretStr | None = Field(None, description="enables POST /draftgate/reload, which must carry it "
                                                           "as a bearer token; unset: the endpoint is off")
    max_head_bytes: int = Field(
        64 * 1024, ge=4096, description="the request line and headers may reach this before their end has come "
                                        "(431 past it; one that ends in the read that crosses it passes, so the "
                                        "bound is this plus a read, 256 KiB): uvicorn takes any size, and one "
                                        "header could exhaust the proxy's memory")
    retry_budget_ratio: float = Field(0.2, ge=0.0, le=1.0, description="retries per request, over 10 s")
    retry_budget_floor: float = Field(5.0, ge=0.0, description="retries per second always allowed")
    kv_cache_full: float = Field(
        0.95, gt=0.0, le=1.0, description="a pool whose scraped KV-cache usage reaches this takes no marginal "
                                          "traffic: a new request there would wait for blocks or cause a preemption")
    kv_cache_ramp: float = Field(
        0.05, ge=0.0, lt=1.0, description="over this much usage below kv_cache_full, marginal traffic thins out by "
                                          "chance in proportion, so proxies sharing a scrape do not turn away at once")
    queue_depth_per_replica: int = Field(16, ge=0, description="requests beyond max_num_seqs the proxy forwards")
    log_requests: bool = Field(True, description="one JSON line per request on stdout (docs/logs.md)")
    record_traffic: RecordTraffic | None = Field(None, description="write the requests routed to a file that "
                                                                   "draftgate evaluate --traffic replays "
                                                                   "(docs/traffic.md)")
    exploration_share: float = Field(0.02, ge=0.0, le=0.5, description="share sent to the pool not chosen")
    price_per_gpu_hour: float = Field(0.0, ge=0.0, description="for the money-saved counters; 0: not exported")
    currency: str = Field("USD", min_length=1, max_length=8, description="label of the money-saved counters")
    proxy_replicas: int = Field(1, ge=1, description="proxies sharing these pools (counter attribution needs 1)")
    drift_window: int = Field(200, ge=10, description="requests over which predicted-observed drift is averaged")
    timeouts: Timeouts = Field(default_factory=Timeouts, description="how long the proxy waits on clients and pools")
    health: Health = Field(default_factory=Health, description="health checks, scrapes and ejection")
    shared_state: SharedStore = Field(default_factory=SharedStore, description="what proxy replicas share, and where")
    plan: Planning = Field(default_factory=Planning, description="the fleet plan and each kind's pools")
    tls: Tls = Field(default_factory=Tls, description="certificates: the proxy's own, and towards https pools")
    cors: Cors = Field(default_factory=Cors, description="CORS on the proxy's own answers")

    @model_validator(mode="before")
    @classmethod
    def _flat_keys(cls, data: Any) -> Any:
        """Keys from before the settings were grouped, moved into their groups; accepted for one
        release, each with a warning. A key written in its group wins over its flat form."""
        if not isinstance(data, dict) or not any(key in FLAT_KEYS for key in data):
            return data
        data = dict(data)
        for key in [k for k in data if k in FLAT_KEYS]:
            group, name = FLAT_KEYS[key]
            section = data.get(group)
            section = section.model_dump(exclude_unset=True) if isinstance(section, BaseModel) else dict(section or {})
            section.setdefault(name, data.pop(key))
            data[group] = section
            log.warning(f"configuration key {key} is deprecated and will be removed: write {group}.{name}",
                        extra={"key": key})
        return data

    @property
    def scheme(self) -> str:
        """How clients reach the proxy."""
        return "https" if self.tls.certfile is not None else "http"

    @model_validator(mode="after")
    def _pools(self) -> ProxySettings:
        if not self.pools:
            raise ValueError("at least one pool is required")
        names = [p.name for p in self.pools]
        if len(set(names)) != len(names):
            raise ValueError(f"pool names must be unique, got {names}")
        for kind, pool in self.plan.routing.items():
            if kind not in KINDS:
                raise ValueError(f"plan.routing: {kind!r} is no kind of request; the kinds are {', '.join(KINDS)}")
            if pool not in names:
                raise ValueError(f"plan.routing: {kind} goes to {pool!r}, which is none of the pools "
                                 f"({', '.join(names)})")
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        yaml_file = getattr(cls, "_yaml_file", None)
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings, _FlatEnvironment(settings_cls)]
        if yaml_file is not None:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=yaml_file))
        return tuple(sources)

    def restart_needed(self, running: ProxySettings) -> list[str]:
        """The keys read at startup whose value here differs from the ``running`` one's:
        a reload to these settings leaves those as they were."""
        return [key for key in READ_AT_STARTUP if _value(self, key) != _value(running, key)]


# Taken once, when the proxy starts: the listening socket, TLS contexts, the
# server's own timeouts, and the sizes of tables built then. A reload leaves
# them as they were, and says so.
READ_AT_STARTUP = ("host", "port", "tls", "timeouts.client_header", "max_head_bytes", "timeouts.keep_alive",
                   "timeouts.graceful_shutdown", "learner_capacity", "affinity_capacity", "response_holders_capacity",
                   "drift_window", "proxy_replicas", "shared_state.address", "shared_state.password",
                   "record_traffic")

# The keys from before the settings were grouped -> (group, key in it), accepted for one release.
FLAT_KEYS: dict[str, tuple[str, str]] = {
    "client_header_timeout": ("timeouts", "client_header"), "client_body_timeout": ("timeouts", "client_body"),
    "keep_alive_timeout": ("timeouts", "keep_alive"), "connect_timeout": ("timeouts", "connect"),
    "first_byte_timeout": ("timeouts", "first_byte"), "answer_timeout": ("timeouts", "answer"),
    "queue_timeout": ("timeouts", "queue"), "graceful_shutdown_seconds": ("timeouts", "graceful_shutdown"),
    "health_interval": ("health", "interval"), "health_timeout": ("health", "timeout"),
    "health_timeouts_to_fail": ("health", "timeouts_to_fail"),
    "eject_after_failed_answers": ("health", "eject_after_failed_answers"),
    "eject_failure_share": ("health", "eject_failure_share"), "ejection_window": ("health", "ejection_window"),
    "ejection_seconds": ("health", "ejection_seconds"), "scrape_interval": ("health", "scrape_interval"),
    "state": ("shared_state", "address"), "state_password": ("shared_state", "password"),
    "state_timeout": ("shared_state", "timeout"), "state_ttl_seconds": ("shared_state", "ttl_seconds"),
    "routing": ("plan", "routing"), "assignment_interval": ("plan", "assignment_interval"),
    "plan_interval": ("plan", "interval"), "plan_candidates": ("plan", "candidates"),
    "tls_ca_file": ("tls", "ca_file"), "tls_certfile": ("tls", "certfile"), "tls_keyfile": ("tls", "keyfile"),
    "tls_client_certfile": ("tls", "client_certfile"), "tls_client_keyfile": ("tls", "client_keyfile"),
    "allowed_origins": ("cors", "allowed_origins"), "allow_credentials": ("cors", "allow_credentials"),
}


def _value(settings: ProxySettings, key: str) -> Any:
    """A setting by its dotted key (``timeouts.keep_alive``)."""
    value: Any = settings
    for part in key.split("."):
        value = getattr(value, part)
    return value


class _FlatEnvironment(PydanticBaseSettingsSource):
    """``DRAFTGATE_<KEY>`` for the keys from before the grouping (``DRAFTGATE_STATE``), read as
    those keys so that ``_flat_keys`` moves them, with their warning; the grouped form is
    ``DRAFTGATE_SHARED_STATE__ADDRESS``."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for key in FLAT_KEYS:
            raw = os.environ.get(f"DRAFTGATE_{key.upper()}")
            if raw is not None:
                found[key] = json.loads(raw) if raw.lstrip().startswith(("[", "{")) else raw
        return found


def _usable_pair(cert_name: str, cert: Path | None, key_name: str, key: Path | None, protocol: int) -> None:
    """A certificate and its key: both or neither, and loadable together."""
    if (cert is None) != (key is None):
        raise ValueError(f"{cert_name} and {key_name} go together: give both, or neither")
    if cert is not None and key is not None:
        try:
            ssl.SSLContext(protocol).load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"{cert_name} {str(cert)!r} with {key_name} {str(key)!r} cannot serve: {exc}") from None


def load_settings(path: str | Path | None = None, **overrides: Any) -> ProxySettings:
    """Load and validate; any problem becomes one ConfigError line naming the key."""
    if path is not None and not Path(path).is_file():
        raise ConfigError(f"config file {path} does not exist")

    class _FromFile(ProxySettings):
        _yaml_file: ClassVar[str | Path | None] = path

    try:
        settings = _FromFile(**overrides)
    except ValidationError as exc:
        error = exc.errors()[0]
        key = ".".join(str(p) for p in error["loc"]) or "(top level)"
        raise ConfigError(f"invalid configuration: {key}: {error['msg']}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"config file {path} is not valid YAML{where}") from None
    return settings


def quick_start_pools(spec_on: list[str], spec_off: list[str], gamma: int | None = None) -> list[dict[str, Any]]:
    """The pools of ``draftgate serve --spec-on URL --spec-off URL``; the speculation pool's depth
    is what it reports unless ``gamma`` is given."""
    pools: list[dict[str, Any]] = []
    if spec_on:
        pools.append({"name": "spec-on", "urls": spec_on, "speculation": {} if gamma is None else {"gamma": gamma}})
    if spec_off:
        pools.append({"name": "spec-off", "urls": spec_off})
    return pools

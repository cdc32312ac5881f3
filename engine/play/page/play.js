// worldpager play: the page. Held keys and pointer movement go to the session as input messages;
// frames come back as binary messages (16-byte header: chunk, frame, input seq, frames in the chunk;
// then a JPEG) and are shown at the video's frame rate, never ahead of it; with `play --truth` (hello's
// `truth`) each frame is followed by its truth (the chunk word's top bit set), drawn beside it when the
// frame is (a frame waits for its truth, so the two always show the same camera); each chunk's log
// figures are drawn beside them. `window.wp` holds what the page knows (read by the tests). A chunk counts as
// stalled when the server says so (`stalled`: its stall_ms above the log's threshold, hello's
// `stall_threshold_ms`), not for any wait at all.
"use strict";

const token = new URLSearchParams(location.search).get("token") || "";
const $ = (id) => document.getElementById(id);
const screen = $("screen"), ctx = screen.getContext("2d");
const truthScreen = $("truth"), tctx = truthScreen.getContext("2d");
const chart = $("chart"), cctx = chart.getContext("2d");
const wp = window.wp = {
  role: null, paused: true, ended: null, info: null, framesShown: 0, framesReceived: 0,
  last: null, latencies: [], chunks: [], underruns: 0, hits: 0, misses: 0, stalls: 0, diskWritten: 0,
  truthReceived: 0, truthShown: 0,
};
const KEYS = new Set(["w", "a", "s", "d", "i", "j", "k", "l", "z", "c"]);
const held = new Set();
let seq = 0, dx = 0, dy = 0, lastSent = 0, fps = 16;
const sentAt = new Map();      // input seq -> when it was sent (performance.now)
const queue = [];              // frames waiting for their turn, in order: {bitmap, truth, chunk, frame, seq}
const waiting = new Map();     // video frame -> its queued entry, until its truth has come (--truth)
const TRUTH_FLAG = 0x80000000; // in a frame message's chunk word: the message is that frame's truth
let nextDue = 0, shownTimes = [], madeTimes = [];

const ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws?token=${encodeURIComponent(token)}`);
ws.binaryType = "arraybuffer";
ws.onmessage = (event) => (typeof event.data === "string" ? onText(JSON.parse(event.data)) : onFrame(event.data));
ws.onclose = () => { if (!wp.ended) setState("disconnected"); };

function send(message) { if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(message)); }

function sendInput() {
  if (wp.role !== "driver") return;
  seq += 1;
  sentAt.set(seq, performance.now());
  send({type: "input", seq, keys: [...held], mouse: [dx, dy]});
  dx = dy = 0;
  lastSent = performance.now();
  $("held").textContent = held.size ? `held: ${[...held].join(" ").toUpperCase()}` : "";
}

function onText(m) {
  if (m.type === "hello") {
    wp.info = m; fps = m.fps;
    $("model").textContent = `${m.model} (${m.mode}), ${m.fps} fps`;
    $("keys").textContent = m.keys;
    $("files").textContent = `video ${m.out} · log ${m.log} · inputs ${m.recording}`;
    screen.width = truthScreen.width = m.frame_size[1]; screen.height = truthScreen.height = m.frame_size[0];
    $("truth-panel").hidden = !m.truth;
    document.querySelector("#view .label").hidden = !m.truth;
  } else if (m.type === "state") {
    wp.role = m.role; wp.paused = m.paused;
    $("role").textContent = m.role; $("role").className = `badge ${m.role}`;
    $("drive").hidden = m.driver || !!wp.ended;
    $("stop").hidden = m.role !== "driver" || !!wp.ended;
    $("dropped").textContent = m.dropped;
    $("refused").textContent = m.refused || 0;
    setState(m.paused ? "paused: nobody steers" : "live");
  } else if (m.type === "chunk") {
    wp.chunks.push(m);
    wp.hits += m.hits || 0; wp.misses += m.misses || 0;
    if (m.stalled) wp.stalls += 1;
    wp.diskWritten += m.disk_bytes_written || 0;
    showChunk(m);
  } else if (m.type === "end") {
    wp.ended = m;
    setState(`ended (${m.status}): ${m.chunks} chunks`);
    $("stop").hidden = true; $("drive").hidden = true;
  }
}

function setState(text) {
  $("state").textContent = text;
  $("state").className = `badge ${text.startsWith("live") ? "driver" : "paused"}`;
}

function decode(buffer, entry, key) {
  createImageBitmap(new Blob([buffer.slice(16)], {type: "image/jpeg"})).then(
    (bitmap) => { entry[key] = bitmap; },
    () => { entry.broken = true; });     // a frame that cannot be decoded is skipped, not waited on
}

function onFrame(buffer) {
  const view = new DataView(buffer), word = view.getUint32(0);
  const meta = {chunk: (word & ~TRUTH_FLAG) >>> 0, frame: view.getUint32(4), seq: view.getUint32(8), count: view.getUint32(12)};
  if (word & TRUTH_FLAG) {
    const entry = waiting.get(meta.frame);
    waiting.delete(meta.frame);
    wp.truthReceived += 1;
    if (entry) decode(buffer, entry, "truth");
    return;
  }
  wp.framesReceived += 1;
  madeTimes.push(performance.now());
  const entry = {bitmap: null, truth: null, wantsTruth: !!(wp.info && wp.info.truth), ...meta};
  queue.push(entry);
  if (entry.wantsTruth) waiting.set(meta.frame, entry);
  decode(buffer, entry, "bitmap");
}

function ready(entry) {
  return entry.bitmap !== null && (!entry.wantsTruth || entry.truth !== null);
}

function draw(now) {
  while (queue.length && queue[0].broken) {
    const gone = queue.shift();
    waiting.delete(gone.frame);
    for (const b of [gone.bitmap, gone.truth]) if (b) b.close();
  }
  if (queue.length && ready(queue[0])) {
    if (nextDue === 0 || now - nextDue > 1000 / fps) {
      if (nextDue !== 0 && wp.framesShown > 0) wp.underruns += 1;
      nextDue = now;
    }
    if (now >= nextDue) {
      const f = queue.shift();
      ctx.drawImage(f.bitmap, 0, 0, screen.width, screen.height);
      f.bitmap.close();
      if (f.truth) {
        tctx.drawImage(f.truth, 0, 0, truthScreen.width, truthScreen.height);
        f.truth.close();
        wp.truthShown += 1;
      }
      wp.framesShown += 1; wp.last = {chunk: f.chunk, frame: f.frame, seq: f.seq};
      shownTimes.push(now);
      for (const [s, t] of sentAt) {       // every input this frame was made with has now been seen
        if (s > f.seq) break;
        wp.latencies.push(now - t);
        sentAt.delete(s);
      }
      nextDue += 1000 / fps;
    }
  }
  if (wp.role === "driver" && (dx || dy) && now - lastSent > 33) sendInput();
  requestAnimationFrame(draw);
}
requestAnimationFrame(draw);

function rate(times, now) {
  while (times.length && now - times[0] > 2000) times.shift();
  return times.length / 2;
}

function percentile(values, p) {
  if (!values.length) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(p / 100 * sorted.length))];
}

const MiB = (b) => `${(b / 1048576).toFixed(1)} MiB`;

function showChunk(m) {
  $("chunk").textContent = `${m.chunk} (${m.frames_total} frames), ${m.wall_ms.toFixed(0)} ms`;
  $("hits").textContent = `${wp.hits} / ${wp.misses}`;
  const over = wp.info ? wp.info.stall_threshold_ms : 0;
  $("stalls").textContent = `${wp.stalls} chunks over ${over} ms, last ${(m.stall_ms || 0).toFixed(1)} ms`;
  $("pool").textContent = m.pool_used_bytes === undefined ? "no pool" :
    `${MiB(m.pool_used_bytes)} used, ${MiB(m.pool_free_bytes)} free`;
  $("disk").textContent = wp.info && wp.info.spill ? `${MiB(wp.diskWritten)} written` : "no --spill";
  $("rss").textContent = MiB(m.rss_bytes);
  $("dropped").textContent = m.dropped;
  drawChart();
}

function drawChart() {
  const rows = wp.chunks.slice(-120), w = chart.width, h = chart.height;
  cctx.clearRect(0, 0, w, h);
  const series = [["wall_ms", "#5b9bff"], ["stall_ms", "#ff6060"], ["rss_bytes", "#999"]];
  for (const [key, colour] of series) {
    const values = rows.map((r) => r[key] || 0), top = Math.max(...values, 1e-9);
    cctx.strokeStyle = colour; cctx.beginPath();
    values.forEach((v, i) => {
      const x = rows.length < 2 ? 0 : (i / (rows.length - 1)) * (w - 4) + 2, y = h - 4 - (v / top) * (h - 8);
      i ? cctx.lineTo(x, y) : cctx.moveTo(x, y);
    });
    cctx.stroke();
  }
}

setInterval(() => {
  const now = performance.now();
  $("fps").textContent = `${rate(shownTimes, now).toFixed(1)} fps (video: ${fps})`;
  $("made").textContent = `${rate(madeTimes, now).toFixed(1)} fps`;
  const recent = wp.latencies.slice(-50), p50 = percentile(recent, 50), p99 = percentile(recent, 99);
  $("latency").textContent = p50 === null ? "–" : `P50 ${p50.toFixed(0)} ms, P99 ${p99.toFixed(0)} ms`;
  $("buffer").textContent = `${queue.length} frames, ${wp.underruns} underruns`;
}, 500);

function keyName(event) { return (event.key || "").toLowerCase(); }

window.addEventListener("keydown", (event) => {
  const k = keyName(event);
  if (!KEYS.has(k) || event.ctrlKey || event.metaKey || event.altKey) return;
  event.preventDefault();
  if (!held.has(k)) { held.add(k); sendInput(); }
});
window.addEventListener("keyup", (event) => {
  const k = keyName(event);
  if (held.delete(k)) { event.preventDefault(); sendInput(); }
});
window.addEventListener("blur", () => { if (held.size) { held.clear(); sendInput(); } });
screen.addEventListener("click", () => { if (screen.requestPointerLock) screen.requestPointerLock(); screen.focus(); });
document.addEventListener("mousemove", (event) => {
  if (document.pointerLockElement !== screen) return;
  dx += event.movementX; dy += event.movementY;
});
$("stop").addEventListener("click", () => send({type: "stop"}));
$("drive").addEventListener("click", () => send({type: "drive"}));

// The drawing pad: a digit drawn with the pointer, turned into the row the digits model was
// trained on (PROTOCOL §5, Mlp: the hosted digits model is scikit-learn's MLP on its bundled UCI
// digits, scripts/digits-model.py). Those rows come from NIST's preprocessing: each digit a
// 32×32 bitmap of on/off pixels, on-pixels counted over 4×4 blocks into 8×8 values 0‥16.
//
// What the model learned, measured on the 450 held-out rows (models/digits-heldout.safetensors):
// every digit spans all 8 block rows (its ink is as tall as the bitmap, 32 px) and about 6 of the
// 8 block columns (about 20–24 px wide, centred); the block maximum is 16 (solid blocks: a
// median of 6 of them a row); and the ink is nearly the same for every class, about 311 of the
// 1 024 pixels (class means 300–333), whatever the length of the digit's strokes: a "1" is a
// bar 8–10 px thick, an "8" thin loops. The pad must hand the model rows like those. Scaling
// what is painted on the 256 px canvas (a 21 px pen) down to the bitmap gives strokes about
// 2 px thick: rows with maxima of 8–12 and ink of 40–104, a third of what the model knows, and
// digits misread. So the pad keeps the strokes themselves (the pointer's points) and redraws
// them at the bitmap's scale with the pen that gives the training data's ink (`rowOfStrokes`).

/** Pixels a side of the model's input. */
export const SIDE = 8;

/** A point, in any unit (the pad's: canvas pixels); x to the right, y down. */
export type Point = [number, number];
/** One pen stroke: the points the pointer passed, in order (one point: a dot). */
export type Stroke = Point[];

/** A pad on `canvas`: pointer strokes in black on white, recorded as well as painted. */
export class Pad {
  private readonly strokes: Stroke[] = [];
  /** The stroke being drawn (the last of `strokes`), or `null` between strokes. */
  private current: Stroke | null = null;
  private readonly ctx: CanvasRenderingContext2D;
  /** Called after each stroke, and when the pad is wiped. */
  onChange: () => void = () => {};

  constructor(readonly canvas: HTMLCanvasElement) {
    this.ctx = canvas.getContext('2d')!;
    this.clear();
    canvas.addEventListener('pointerdown', (e) => {
      canvas.setPointerCapture(e.pointerId);
      this.penDown(this.at(e));
    });
    canvas.addEventListener('pointermove', (e) => {
      if (!this.current) return;
      // the browser hands over one move a frame; the moves it merged into it are the pen's
      // path between the two (without them a quick curve would be read as its chords)
      const moves = e.getCoalescedEvents?.() ?? [];
      for (const m of moves.length > 0 ? moves : [e]) this.penMove(this.at(m));
    });
    canvas.addEventListener('pointerup', () => this.penUp());
    canvas.addEventListener('pointercancel', () => this.penUp());
  }

  /** Starts a stroke at `p` (canvas pixels). */
  penDown(p: Point) {
    this.current = [p];
    this.strokes.push(this.current);
    this.line(p, p);
  }

  /** Draws the stroke on to `p`, if one is started. */
  penMove(p: Point) {
    const s = this.current;
    if (!s) return;
    this.line(s[s.length - 1], p);
    s.push(p);
  }

  /** Ends the stroke, if one is started: `onChange`. */
  penUp() {
    if (!this.current) return;
    this.current = null;
    this.onChange();
  }

  private at(e: PointerEvent): Point {
    const r = this.canvas.getBoundingClientRect();
    return [((e.clientX - r.left) * this.canvas.width) / r.width, ((e.clientY - r.top) * this.canvas.height) / r.height];
  }

  /** Paints a segment of a stroke, for the person to see (the model sees `row()`). */
  private line(a: Point, b: Point) {
    const c = this.ctx;
    c.strokeStyle = '#000';
    c.lineWidth = this.canvas.width / 12;
    c.lineCap = 'round';
    c.lineJoin = 'round';
    c.beginPath();
    c.moveTo(...a);
    c.lineTo(...b);
    c.stroke();
  }

  /** Wipes the pad. */
  clear() {
    this.strokes.length = 0;
    this.current = null;
    this.ctx.fillStyle = '#fff';
    this.ctx.fillRect(0, 0, this.canvas.width, this.canvas.height);
    this.onChange();
  }

  /** Whether nothing is drawn. */
  isEmpty(): boolean {
    return this.strokes.length === 0;
  }

  /** The 64 values 0‥16 of what is drawn, or `null` when nothing is. */
  row(): Int8Array | null {
    return rowOfStrokes(this.strokes);
  }
}

/** The bitmap's side, NIST's. */
const BITMAP = 32;
/** The box the ink is fitted to (aspect kept), centred in the bitmap: the training digits are
 * as tall as the bitmap and at most about 24 px wide (6 of the 8 block columns). */
const BOX_W = 24;
const BOX_H = 32;
/** On-pixels a training digit has, whatever its class (the held-out rows' mean ink). */
const INK = 311;
/** The pen's radius in bitmap pixels, at least and at most. The training data's strokes are
 * never much thinner than 4 px (a block a stroke crosses is solid, 16; the longest digits, its
 * 8s, carry the most ink, 333 on average): a long digit gets no thinner pen than that, whatever
 * its ink. A short one (a "1") gets a broad bar, as in the training data, up to 12 px. */
const PEN_MIN = 2;
const PEN_MAX = 6;

/** The model's row of a drawing given as its strokes (in any unit: only their shape counts), or
 * `null` when there is none. The strokes are redrawn as NIST's preprocessing has them: the
 * strokes' box scaled to fit 24×32 with its aspect kept (a "1" stays narrow: its width comes
 * from the pen, as in the training data, not from stretching), centred in a 32×32 bitmap,
 * drawn with a round pen (a pixel is on when its centre is within the pen's radius of a stroke)
 * whose radius is chosen so that the digit has the training data's ink, then on-pixels counted
 * over 4×4 blocks into 8×8 values 0‥16. Plain arithmetic, no canvas: the same function runs in
 * the page and in Node (app/web/e2e/digits-eval.mjs). */
export function rowOfStrokes(strokes: readonly (readonly (readonly [number, number])[])[]): Int8Array | null {
  const drawn = strokes.filter((s) => s.length > 0);
  if (drawn.length === 0) return null;
  let [x0, y0, x1, y1] = [Infinity, Infinity, -Infinity, -Infinity];
  for (const s of drawn)
    for (const [x, y] of s) {
      x0 = Math.min(x0, x);
      x1 = Math.max(x1, x);
      y0 = Math.min(y0, y);
      y1 = Math.max(y1, y);
    }
  if (![x0, y0, x1, y1].every(Number.isFinite)) return null;
  // the pen's radius: the ink grows with it (the box shrinks by the pen, so not strictly), so
  // a bisection to the training data's ink: the bitmap of the broadest pen with at most that ink
  // (the thinnest pen's when even that has more)
  let [lo, hi] = [PEN_MIN, PEN_MAX];
  let bitmap = render(drawn, [x0, y0, x1, y1], lo);
  if (count(bitmap) < INK) {
    const thick = render(drawn, [x0, y0, x1, y1], hi);
    if (count(thick) <= INK) bitmap = thick;
    else
      for (let i = 0; i < 10; i++) {
        const r = (lo + hi) / 2;
        const b = render(drawn, [x0, y0, x1, y1], r);
        if (count(b) <= INK) [lo, bitmap] = [r, b];
        else hi = r;
      }
  }
  const row = new Int8Array(SIDE * SIDE);
  for (let i = 0; i < BITMAP * BITMAP; i++) row[Math.floor(i / BITMAP / 4) * SIDE + Math.floor((i % BITMAP) / 4)] += bitmap[i];
  return row;
}

/** The 32×32 on/off bitmap of `strokes` (box `[x0, y0, x1, y1]`) drawn with a pen of radius `r`
 * (bitmap pixels): the strokes' middle lines fitted, aspect kept, to the box less the pen, so
 * that the ink fits it. */
function render(strokes: readonly (readonly (readonly [number, number])[])[], [x0, y0, x1, y1]: number[], r: number): Uint8Array {
  const [w, h] = [x1 - x0, y1 - y0];
  // a dot (no extent) stays a dot of the pen
  const scale = Math.min(w > 0 ? (BOX_W - 2 * r) / w : Infinity, h > 0 ? (BOX_H - 2 * r) / h : Infinity);
  const k = Number.isFinite(scale) ? scale : 0;
  const at = ([x, y]: readonly [number, number]): Point => [BITMAP / 2 + (x - (x0 + x1) / 2) * k, BITMAP / 2 + (y - (y0 + y1) / 2) * k];
  const bitmap = new Uint8Array(BITMAP * BITMAP);
  for (const s of strokes) {
    let a = at(s[0]);
    for (let i = 0; i < s.length; i++) {
      const b = at(s[i]);
      segment(bitmap, a, b, r);
      a = b;
    }
  }
  return bitmap;
}

/** Turns on the pixels whose centres lie within `r` of the segment `a`–`b`. */
function segment(bitmap: Uint8Array, [ax, ay]: Point, [bx, by]: Point, r: number) {
  const [dx, dy] = [bx - ax, by - ay];
  const len2 = dx * dx + dy * dy;
  const lo = (v: number) => Math.max(0, Math.floor(v - r - 0.5));
  const hi = (v: number) => Math.min(BITMAP - 1, Math.ceil(v + r - 0.5));
  for (let y = lo(Math.min(ay, by)); y <= hi(Math.max(ay, by)); y++)
    for (let x = lo(Math.min(ax, bx)); x <= hi(Math.max(ax, bx)); x++) {
      const [px, py] = [x + 0.5 - ax, y + 0.5 - ay];
      // the nearest point of the segment, as a fraction of the way from a to b
      const t = len2 > 0 ? Math.max(0, Math.min(1, (px * dx + py * dy) / len2)) : 0;
      const [ex, ey] = [px - t * dx, py - t * dy];
      if (ex * ex + ey * ey <= r * r) bitmap[y * BITMAP + x] = 1;
    }
}

function count(bitmap: Uint8Array): number {
  let n = 0;
  for (const v of bitmap) n += v;
  return n;
}

/** Paints `row` (0‥16) onto a small canvas, as the model sees it. */
export function paintRow(canvas: HTMLCanvasElement, row: Int8Array | null) {
  const c = canvas.getContext('2d')!;
  const img = c.createImageData(SIDE, SIDE);
  for (let i = 0; i < SIDE * SIDE; i++) {
    const v = 255 - Math.round(((row?.[i] ?? 0) * 255) / 16);
    img.data.set([v, v, v, 255], 4 * i);
  }
  canvas.width = SIDE;
  canvas.height = SIDE;
  c.putImageData(img, 0, 0);
}

/** Drawing with the keyboard on a focused pad: the arrow keys move the pen (Shift: three
 * times further), Space lowers or lifts it (a stroke runs from lowering to lifting), Enter or
 * Escape lifts it, Delete or Backspace clears the pad. `cursor` (an element positioned over
 * the pad) shows where the pen is; `say` announces what happened (an aria-live region). */
export function keyboardPen(pad: Pad, cursor: HTMLElement, say: (text: string) => void) {
  const canvas = pad.canvas;
  const step = canvas.width / 16;
  let at: Point = [canvas.width / 2, canvas.height / 2];
  let down = false;
  const place = () => {
    const r = canvas.getBoundingClientRect();
    const scale = r.width / canvas.width;
    cursor.style.left = `${canvas.offsetLeft + at[0] * scale}px`;
    cursor.style.top = `${canvas.offsetTop + at[1] * scale}px`;
    cursor.classList.toggle('down', down);
  };
  canvas.addEventListener('focus', () => {
    cursor.hidden = false;
    place();
  });
  canvas.addEventListener('blur', () => {
    if (down) pad.penUp();
    down = false;
    cursor.hidden = true;
  });
  canvas.addEventListener('keydown', (e) => {
    const d = e.shiftKey ? 3 * step : step;
    const move = { ArrowLeft: [-d, 0], ArrowRight: [d, 0], ArrowUp: [0, -d], ArrowDown: [0, d] }[e.key];
    if (move) {
      at = [Math.min(canvas.width, Math.max(0, at[0] + move[0])), Math.min(canvas.height, Math.max(0, at[1] + move[1]))];
      if (down) pad.penMove(at);
    } else if (e.key === ' ') {
      down = !down;
      if (down) pad.penDown(at);
      else pad.penUp();
      say(down ? 'pen down: the arrows draw' : 'pen up');
    } else if (e.key === 'Enter' || e.key === 'Escape') {
      if (down) pad.penUp();
      down = false;
      say('pen up');
    } else if (e.key === 'Delete' || e.key === 'Backspace') {
      down = false;
      pad.clear();
      say('pad cleared');
    } else return;
    e.preventDefault();
    place();
  });
}

// The drawing pad: a digit drawn with the pointer, turned into the row the digits model was
// trained on (scikit-learn's digits: a 32×32 bitmap of the ink, centred and scaled to fit 20×20
// as NIST's preprocessing does, summed over 4×4 blocks into 8×8 values 0‥16).

/** Pixels a side of the model's input. */
export const SIDE = 8;

/** A pad on `canvas`: pointer strokes in black on white. */
export class Pad {
  private drawing = false;
  private last: [number, number] | null = null;
  private readonly ctx: CanvasRenderingContext2D;
  /** Called after each stroke. */
  onChange: () => void = () => {};

  constructor(readonly canvas: HTMLCanvasElement) {
    this.ctx = canvas.getContext('2d', { willReadFrequently: true })!;
    this.clear();
    canvas.addEventListener('pointerdown', (e) => {
      this.drawing = true;
      this.last = this.at(e);
      canvas.setPointerCapture(e.pointerId);
      this.line(this.last, this.last);
    });
    canvas.addEventListener('pointermove', (e) => {
      if (!this.drawing) return;
      const p = this.at(e);
      this.line(this.last ?? p, p);
      this.last = p;
    });
    const end = () => {
      if (this.drawing) this.onChange();
      this.drawing = false;
      this.last = null;
    };
    canvas.addEventListener('pointerup', end);
    canvas.addEventListener('pointercancel', end);
  }

  private at(e: PointerEvent): [number, number] {
    const r = this.canvas.getBoundingClientRect();
    return [((e.clientX - r.left) * this.canvas.width) / r.width, ((e.clientY - r.top) * this.canvas.height) / r.height];
  }

  private line(a: [number, number], b: [number, number]) {
    const c = this.ctx;
    c.strokeStyle = '#000';
    c.lineWidth = this.canvas.width / 12;
    c.lineCap = 'round';
    c.beginPath();
    c.moveTo(...a);
    c.lineTo(...b);
    c.stroke();
  }

  /** Wipes the pad. */
  clear() {
    this.ctx.fillStyle = '#fff';
    this.ctx.fillRect(0, 0, this.canvas.width, this.canvas.height);
    this.onChange();
  }

  /** The 64 values 0‥16 of what is drawn, or `null` when nothing is. */
  row(): Int8Array | null {
    return rowOf(this.ctx.getImageData(0, 0, this.canvas.width, this.canvas.height));
  }
}

/** The model's row of an image (dark ink on a light ground), or `null` when it is blank. */
export function rowOf(img: ImageData): Int8Array | null {
  const { width: w, height: h, data } = img;
  const ink = (x: number, y: number) => 255 - data[4 * (y * w + x)] > 127;
  let [x0, y0, x1, y1] = [w, h, -1, -1];
  for (let y = 0; y < h; y++)
    for (let x = 0; x < w; x++)
      if (ink(x, y)) {
        x0 = Math.min(x0, x);
        x1 = Math.max(x1, x);
        y0 = Math.min(y0, y);
        y1 = Math.max(y1, y);
      }
  if (x1 < 0) return null;
  // the ink's box scaled to fit 20×20 (aspect kept), centred in 32×32
  const bw = x1 - x0 + 1;
  const bh = y1 - y0 + 1;
  const scale = 20 / Math.max(bw, bh);
  const ox = (32 - bw * scale) / 2;
  const oy = (32 - bh * scale) / 2;
  const bitmap = new Uint8Array(32 * 32);
  for (let by = 0; by < 32; by++)
    for (let bx = 0; bx < 32; bx++) {
      // the bitmap pixel's centre, back in the image
      const x = Math.floor(x0 + (bx + 0.5 - ox) / scale);
      const y = Math.floor(y0 + (by + 0.5 - oy) / scale);
      if (x >= x0 && x <= x1 && y >= y0 && y <= y1 && ink(x, y)) bitmap[by * 32 + bx] = 1;
    }
  const row = new Int8Array(SIDE * SIDE);
  for (let i = 0; i < 32 * 32; i++) row[Math.floor(i / 32 / 4) * SIDE + Math.floor((i % 32) / 4)] += bitmap[i];
  return row;
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

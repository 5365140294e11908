// Digits 0‥9 as a person draws them on the page's pad with a mouse, for the end-to-end test to
// replay (Playwright: mouse.move to a stroke's first point, down, mouse.move with `steps` to
// each next point, up) and for the offline check of the pad's preprocessing
// (e2e/digits-eval.mjs). Each digit is a list of strokes, each stroke a list of [x, y] points as
// fractions (0‥1) of the pad's width and height, y down. The shapes are ordinary handwriting, not
// tuned to the model: about 45–65 % of the pad tall, a little off centre, curves as 12–24 points
// a loop, the pen's usual directions (a 0 counter-clockwise from the top, a 4 in two strokes, a 5
// with its bar added last).

/** Points along an ellipse centred at (cx, cy) with radii rx, ry, from angle a0 to a1 in degrees
 * (0: right, 90: down, so increasing angles turn clockwise on the screen), n + 1 points. */
function arc(cx, cy, rx, ry, a0, a1, n) {
  return Array.from({ length: n + 1 }, (_, i) => {
    const a = ((a0 + ((a1 - a0) * i) / n) * Math.PI) / 180;
    return [cx + rx * Math.cos(a), cy + ry * Math.sin(a)];
  });
}

/** A figure eight crossing itself at (cx, cy): loops half-widths wTop, wBottom, reaching
 * hTop above and hBottom below, drawn from a little before its top round both loops and a little
 * past where it began, n + 1 points. */
function eight(cx, cy, wTop, wBottom, hTop, hBottom, n) {
  return Array.from({ length: n + 1 }, (_, i) => {
    const t = -0.5 + ((2 * Math.PI + 0.7) * i) / n;
    const up = Math.cos(t) > 0;
    return [cx - (up ? wTop : wBottom) * Math.sin(2 * t), cy - (up ? hTop : hBottom) * Math.cos(t)];
  });
}

/** Points rounded to a thousandth of the pad, consecutive repeats dropped. */
function stroke(...parts) {
  const out = [];
  for (const [x, y] of parts.flat()) {
    const p = [Math.round(x * 1000) / 1000, Math.round(y * 1000) / 1000];
    const q = out[out.length - 1];
    if (!q || q[0] !== p[0] || q[1] !== p[1]) out.push(p);
  }
  return out;
}

/** `DIGIT_STROKES[d]`: the strokes of digit d. */
export const DIGIT_STROKES = [
  // 0: an oval, begun at the top and drawn counter-clockwise, closed with a little overlap
  [stroke(arc(0.49, 0.5, 0.17, 0.27, -80, -455, 22))],
  // 1: one stroke down, leaning a little
  [stroke([[0.53, 0.22], [0.52, 0.4], [0.5, 0.6], [0.49, 0.78]])],
  // 2: a hook over the top, down to the bottom left, a bar to the right
  [stroke(arc(0.49, 0.36, 0.15, 0.13, 200, 360, 12), arc(0.49, 0.36, 0.15, 0.13, 0, 40, 3), [[0.5, 0.55], [0.4, 0.68], [0.33, 0.76], [0.5, 0.755], [0.68, 0.75]])],
  // 3: two bumps to the right, meeting in the middle
  [stroke(arc(0.48, 0.34, 0.15, 0.12, 210, 450, 14), arc(0.48, 0.61, 0.17, 0.15, 270, 500, 16))],
  // 4: down and across in one stroke, then the upright through it
  [stroke([[0.42, 0.22], [0.38, 0.38], [0.33, 0.55], [0.5, 0.56], [0.7, 0.555]]), stroke([[0.6, 0.3], [0.6, 0.5], [0.6, 0.65], [0.59, 0.8]])],
  // 5: down and round the belly, then the bar on top
  [stroke([[0.37, 0.24], [0.36, 0.35], [0.35, 0.46]], arc(0.48, 0.6, 0.15, 0.15, 230, 480, 16)), stroke([[0.37, 0.24], [0.52, 0.235], [0.66, 0.23]])],
  // 6: down the left side from the top right, on round the bottom and up into a loop
  [stroke(arc(0.62, 0.52, 0.26, 0.3, 260, 172, 8), arc(0.5, 0.63, 0.14, 0.13, 190, -150, 18))],
  // 7: a bar, then the long diagonal down to the left
  [stroke([[0.32, 0.25], [0.5, 0.25], [0.68, 0.245], [0.6, 0.42], [0.52, 0.6], [0.45, 0.78]])],
  // 8: from the top right, over the top and down the left, across the waist to the right, round
  // the bottom and back up across the waist, up the right to where it began
  [stroke(eight(0.5, 0.49, 0.12, 0.15, 0.22, 0.27, 24))],
  // 9: a loop drawn anticlockwise from its right, then the stem down from its right side
  [stroke(arc(0.48, 0.35, 0.14, 0.12, 0, -360, 18), [[0.62, 0.45], [0.61, 0.6], [0.59, 0.79]])],
];

package debug

import (
	"math"
	"strconv"

	"github.com/ringxds/ringxds/internal/ringhash"
)

// Geometry of the drawings, in SVG user units. The page scales them with CSS.
const (
	ringBox    = 240.0 // ring viewBox is ringBox x ringBox
	ringCenter = ringBox / 2
	ringRadius = 96.0 // middle of the band
	ringWidth  = 30.0
	stripWidth = 600.0
	stripTall  = 40.0
)

// maxSegments bounds the merged arcs (or strip runs) drawn exactly for one
// cluster. A 65537-slot Maglev table of three endpoints has about 40,000
// runs and an 8M-entry ring far more: drawn exactly they would be megabytes
// of SVG refetched every few seconds, while a drawing a few hundred pixels
// wide cannot show anything finer than a pixel anyway. Above the bound the
// drawing is binned (see drawBins).
const maxSegments = 2048

// drawBins is the resolution of a binned drawing: the hash space (or table)
// is cut into this many equal bins, and each bin is painted in the colour of
// the endpoint that owns most of it.
const drawBins = 1024

// segment is a stretch of the hash space, as fractions of it, owned by one
// endpoint. On a ring, start may be negative for the arc that wraps past
// zero; end is always in (0, 1].
type segment struct {
	start, end float64
	owner      int
}

// drawing is the SVG geometry of one cluster's ring or table, computed once
// per published snapshot.
type drawing struct {
	// Strip is true for a Maglev table (drawn as a strip), false for a ring.
	Strip bool
	// Size is the number of ring entries or table slots.
	Size int
	// Segments is the number of merged arcs or runs before any binning.
	Segments int
	// Binned is true when the drawing shows drawBins bins, not every arc.
	Binned bool
	// Paths holds one SVG path per endpoint, in endpoint order; "" when the
	// endpoint owns nothing visible.
	Paths []string
	// Shares is each endpoint's exact fraction of the hash space or table.
	Shares []float64
}

// draw computes the drawing of a decoded ring. n is the endpoint count, so
// that endpoints owning no entry still get a (empty) path.
func draw(r ringhash.Ring, n int) drawing {
	d := drawing{Strip: r.Policy() == ringhash.PolicyMaglev, Size: r.Size(), Paths: make([]string, n), Shares: make([]float64, n)}
	dr, ok := r.(ringhash.Drawable)
	if !ok || d.Size == 0 {
		return d
	}
	var segs []segment
	if d.Strip {
		segs = tableSegments(dr, d.Size, d.Shares)
	} else {
		segs = ringSegments(dr, d.Size, d.Shares)
	}
	d.Segments = len(segs)
	if len(segs) > maxSegments {
		segs = binSegments(segs, drawBins)
		d.Binned = true
	}
	bufs := make([][]byte, n)
	for _, s := range segs {
		if d.Strip {
			bufs[s.owner] = appendRun(bufs[s.owner], s)
		} else {
			bufs[s.owner] = appendArc(bufs[s.owner], s)
		}
	}
	for i, b := range bufs {
		d.Paths[i] = string(b)
	}
	return d
}

// ringSegments turns ring entries into merged arcs. Entry i owns the hashes
// from the previous entry's hash (exclusive) to its own (inclusive); the
// first entry also owns everything above the last one, wrapping through
// zero. shares receives each owner's exact fraction of the hash space.
func ringSegments(dr ringhash.Drawable, size int, shares []float64) []segment {
	hashes := make([]uint64, 0, size)
	owners := make([]int, 0, size)
	dr.Entries(func(h uint64, ep int) {
		hashes = append(hashes, h)
		owners = append(owners, ep)
	})
	if len(hashes) == 0 {
		return nil
	}
	if len(hashes) == 1 {
		shares[owners[0]] = 1
		return []segment{{start: 0, end: 1, owner: owners[0]}}
	}
	const two64 = 1 << 64
	prev := hashes[len(hashes)-1]
	var segs []segment
	for i, h := range hashes {
		// Unsigned subtraction wraps, so the first arc's length is right too.
		shares[owners[i]] += float64(h-prev) / two64
		start := float64(prev) / two64
		if i == 0 {
			start-- // the wrapping arc starts below zero
		}
		end := float64(h) / two64
		if n := len(segs); n > 0 && segs[n-1].owner == owners[i] {
			segs[n-1].end = end
		} else {
			segs = append(segs, segment{start: start, end: end, owner: owners[i]})
		}
		prev = h
	}
	// The last arc and the wrapping first arc meet at zero: one arc if the
	// same endpoint owns both.
	if n := len(segs); n > 1 && segs[0].owner == segs[n-1].owner {
		segs[0].start = segs[n-1].start - 1
		segs = segs[:n-1]
	}
	return segs
}

// tableSegments turns Maglev slots into merged runs; slot i covers
// [i/size, (i+1)/size).
func tableSegments(dr ringhash.Drawable, size int, shares []float64) []segment {
	var segs []segment
	slot := 0
	dr.Entries(func(_ uint64, ep int) {
		shares[ep] += 1 / float64(size)
		start, end := float64(slot)/float64(size), float64(slot+1)/float64(size)
		if n := len(segs); n > 0 && segs[n-1].owner == ep {
			segs[n-1].end = end
		} else {
			segs = append(segs, segment{start: start, end: end, owner: ep})
		}
		slot++
	})
	return segs
}

// binSegments resamples segments to bins equal bins, each given wholly to
// the endpoint covering most of it, then merges neighbouring bins of the
// same owner. Segments must be in order and cover [s0.start, s0.start+1).
func binSegments(segs []segment, bins int) []segment {
	// Unwrap the arc that starts below zero into its two halves so every
	// piece lies within [0, 1].
	pieces := make([]segment, 0, len(segs)+1)
	for _, s := range segs {
		if s.start < 0 {
			pieces = append(pieces, segment{start: s.start + 1, end: 1, owner: s.owner})
			s.start = 0
		}
		pieces = append(pieces, s)
	}
	// The wrapped tail is at the front; move it to the back to keep order.
	if len(pieces) > 1 && pieces[0].start > pieces[1].start {
		pieces = append(pieces[1:], pieces[0])
	}

	winner := make([]int, bins)
	cover := map[int]float64{}
	bin := 0
	flush := func() {
		best, bestCover := -1, -1.0
		for ep, c := range cover {
			if c > bestCover || c == bestCover && ep < best {
				best, bestCover = ep, c
			}
		}
		if best < 0 && bin > 0 {
			best = winner[bin-1] // cannot happen for segments covering the space
		}
		winner[bin] = max(best, 0)
		clear(cover)
	}
	for _, p := range pieces {
		for p.start < p.end {
			binEnd := float64(bin+1) / float64(bins)
			if p.start >= binEnd && bin < bins-1 {
				flush()
				bin++
				continue
			}
			cut := math.Min(p.end, binEnd)
			if bin == bins-1 {
				cut = p.end
			}
			cover[p.owner] += cut - p.start
			p.start = cut
		}
	}
	flush()
	for ; bin < bins-1; bin++ { // only reached if pieces ended early
		winner[bin+1] = winner[bin]
	}

	var out []segment
	for i, w := range winner {
		start, end := float64(i)/float64(bins), float64(i+1)/float64(bins)
		if n := len(out); n > 0 && out[n-1].owner == w {
			out[n-1].end = end
		} else {
			out = append(out, segment{start: start, end: end, owner: w})
		}
	}
	if n := len(out); n > 1 && out[0].owner == out[n-1].owner {
		out[0].start = out[n-1].start - 1
		out = out[:n-1]
	}
	return out
}

// ringPoint is the point at fraction f of the way round a circle of radius
// r, starting at twelve o'clock and going clockwise (SVG's y axis points
// down).
func ringPoint(f, r float64) (x, y float64) {
	a := 2*math.Pi*f - math.Pi/2
	return ringCenter + r*math.Cos(a), ringCenter + r*math.Sin(a)
}

// minCurvedArc is the shortest arc, as a fraction of the ring, drawn with
// SVG arc commands. Shorter ones are drawn with straight edges: at that
// length the difference is far below a pixel, and an SVG arc between two
// nearly equal rounded points can bend the wrong way round a circle of
// another centre.
const minCurvedArc = 1.0 / 720

// appendArc appends the annular sector of s as a closed, filled shape. A
// filled outline rather than a thick stroke keeps neighbouring arcs from
// leaving gaps or overlapping where the stroker miters tiny arcs. A whole
// turn is two halves, since an SVG arc cannot start and end at one point.
func appendArc(b []byte, s segment) []byte {
	if s.end-s.start >= 1 {
		mid := s.start + 0.5
		b = appendArc(b, segment{start: s.start, end: mid})
		return appendArc(b, segment{start: mid, end: s.start + 1})
	}
	const outer, inner = ringRadius + ringWidth/2, ringRadius - ringWidth/2
	curved := s.end-s.start >= minCurvedArc
	large := byte('0')
	if s.end-s.start > 0.5 {
		large = '1'
	}
	edge := func(b []byte, r float64, sweep byte, x, y float64) []byte {
		if curved {
			b = append(b, 'A')
			b = appendNum(b, r)
			b = append(b, ' ')
			b = appendNum(b, r)
			b = append(b, " 0 "...)
			b = append(b, large, ' ', sweep, ' ')
		} else {
			b = append(b, 'L')
		}
		return appendCoord(b, x, y)
	}
	x, y := ringPoint(s.start, outer)
	b = append(b, 'M')
	b = appendCoord(b, x, y)
	x, y = ringPoint(s.end, outer)
	b = edge(b, outer, '1', x, y)
	x, y = ringPoint(s.end, inner)
	b = append(b, 'L')
	b = appendCoord(b, x, y)
	x, y = ringPoint(s.start, inner)
	b = edge(b, inner, '0', x, y)
	return append(b, 'Z')
}

// appendRun appends a rectangle for s on the strip.
func appendRun(b []byte, s segment) []byte {
	x, w := s.start*stripWidth, (s.end-s.start)*stripWidth
	b = append(b, 'M')
	b = appendCoord(b, x, 0)
	b = append(b, 'h')
	b = appendNum(b, w)
	b = append(b, 'v')
	b = appendNum(b, stripTall)
	b = append(b, 'h')
	b = appendNum(b, -w)
	return append(b, 'z')
}

func appendCoord(b []byte, x, y float64) []byte {
	b = appendNum(b, x)
	b = append(b, ' ')
	return appendNum(b, y)
}

// appendNum writes v with at most two decimals: a hundredth of a user unit
// is far below a pixel, and shorter numbers keep the SVG small.
func appendNum(b []byte, v float64) []byte {
	v = math.Round(v*100) / 100
	if v == 0 {
		v = 0 // no "-0"
	}
	return strconv.AppendFloat(b, v, 'f', -1, 64)
}

// palette holds well-separated colours for the first endpoints, 7 bytes
// each; later ones get colours spread round the hue circle by the golden
// angle.
const palette = "#4e79a7#f28e2b#59a14f#e15759#76b7b2#edc948#b07aa1#ff9da7#9c755f#bab0ac#1f77b4#17becf"

// endpointColor is the colour of endpoint i, as #rrggbb so that it is a
// safe attribute value in any template context.
func endpointColor(i int) string {
	if i < len(palette)/7 {
		return palette[7*i : 7*i+7]
	}
	h := math.Mod(float64(i)*137.508, 360)
	return hslHex(h, 0.55, 0.5)
}

// hslHex converts an HSL colour (h in degrees, s and l in [0,1]) to #rrggbb.
func hslHex(h, s, l float64) string {
	c := (1 - math.Abs(2*l-1)) * s
	x := c * (1 - math.Abs(math.Mod(h/60, 2)-1))
	m := l - c/2
	var r, g, b float64
	switch {
	case h < 60:
		r, g, b = c, x, 0
	case h < 120:
		r, g, b = x, c, 0
	case h < 180:
		r, g, b = 0, c, x
	case h < 240:
		r, g, b = 0, x, c
	case h < 300:
		r, g, b = x, 0, c
	default:
		r, g, b = c, 0, x
	}
	const hex = "0123456789abcdef"
	out := []byte{'#', 0, 0, 0, 0, 0, 0}
	for i, v := range []float64{r, g, b} {
		n := int(math.Round((v + m) * 255))
		out[1+2*i], out[2+2*i] = hex[n>>4], hex[n&15]
	}
	return string(out)
}

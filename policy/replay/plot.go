package replay

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// Series is one policy's hit rate at each capacity of a plot.
type Series struct {
	Name     string
	HitRates []float64
}

// WritePlot draws hit rate against capacity (log scale) as SVG, one line
// per series.
func WritePlot(w io.Writer, title string, capacities []int64, series []Series) error {
	const (
		width, height          = 720, 440
		left, right, top, foot = 70, 170, 40, 50
	)
	plotW, plotH := float64(width-left-right), float64(height-top-foot)
	lo, hi := math.Log(float64(capacities[0])), math.Log(float64(capacities[len(capacities)-1]))
	if hi == lo {
		hi = lo + 1
	}
	top1 := 0.0
	for _, s := range series {
		for _, h := range s.HitRates {
			top1 = max(top1, h)
		}
	}
	yMax := math.Ceil(top1*10+0.001) / 10
	x := func(c int64) float64 { return left + plotW*(math.Log(float64(c))-lo)/(hi-lo) }
	y := func(h float64) float64 { return top + plotH*(1-h/yMax) }
	colors := []string{"#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"}

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="15">%s</text>`+"\n", left, escape(title))
	for i := 0; i <= 5; i++ {
		h := yMax * float64(i) / 5
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, left+plotW, y(h), y(h))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%.2f</text>`+"\n", left-6, y(h)+4, h)
	}
	for _, c := range capacities {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%.1f" stroke="#ddd"/>`+"\n", x(c), x(c), top, top+plotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x(c), top+plotH+16, tokens(c))
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">capacity (tokens)</text>`+"\n", left+plotW/2, height-10)
	fmt.Fprintf(&b, `<text transform="translate(18,%.1f) rotate(-90)" text-anchor="middle">hit rate</text>`+"\n", top+plotH/2)
	for i, s := range series {
		color := colors[i%len(colors)]
		var pts []string
		for j, h := range s.HitRates {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(capacities[j]), y(h)))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color, strings.Join(pts, " "))
		for _, p := range pts {
			xy := strings.Split(p, ",")
			fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`+"\n", xy[0], xy[1], color)
		}
		ly := top + 10 + 20*i
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="%s" stroke-width="2"/>`+"\n", left+plotW+15, left+plotW+35, ly, ly, color)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d">%s</text>`+"\n", left+plotW+40, ly+4, escape(s.Name))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func tokens(n int64) string {
	switch {
	case n >= 1e6:
		return fmt.Sprintf("%.3gM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.3gk", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

package td3score

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSelectQuantileIsNumPysQuantile holds the selection to the quantile of the sorted values, bit for
// bit, on random values with and without ties (sizes 1 to 700; the shared vectors hold the quantile of
// the sorted values to NumPy's).
func TestSelectQuantileIsNumPysQuantile(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 3000 {
		k := 1 + rng.IntN(700)
		x := make([]float64, k)
		for i := range x {
			switch trial % 3 {
			case 0:
				x[i] = rng.Float64()
			case 1:
				x[i] = float64(rng.IntN(5)) / 4 // many ties
			default:
				x[i] = float64(k - i) // descending
			}
		}
		sorted := slices.Sorted(slices.Values(x))
		for _, q := range []float64{0, 0.1, 0.25, 0.5, 0.9, 1} {
			work := slices.Clone(x)
			got, want := selectQuantile(work, q), linearQuantile(sorted, q)
			if math.Float64bits(got) != math.Float64bits(want) {
				t.Fatalf("trial %d, %d values, q %g: selected %v, sorted %v", trial, k, q, got, want)
			}
			if !slices.Equal(slices.Sorted(slices.Values(work)), sorted) {
				t.Fatalf("trial %d: selection lost or changed values", trial)
			}
		}
		n := rng.IntN(k)
		work := slices.Clone(x)
		if v := nthElement(work, n); v != sorted[n] || slices.Max(work[:n+1]) != v || slices.Min(work[n:]) != v {
			t.Fatalf("trial %d: nthElement(%d) = %v, sorted %v, or the sides are out of order", trial, n, v, sorted[n])
		}
	}
}

// Package actor runs a trained TD3 actor exported by `td3sched export-onnx` inside a Go process: the
// td3score plugin's in-process inference (inference: plugin), with no cgo and no ONNX Runtime.
//
// It is not an ONNX runtime. It reads the ONNX protobuf with protowire and evaluates exactly the op set
// of the exported graphs, for one observation at a time:
//
//	Cast (to float or double), Sub, Div, Mul (a tensor and one of its size or a scalar), Clip, Constant,
//	Gemm (transA 0), Relu, Tanh
//
// which is the observation normaliser (in float64), the MLP and the output scale. Values the graph holds
// as double are computed in float64, float values are rounded to float32 after each op, and a Gemm
// accumulates in float64 before its rounding: within 1e-4 of ONNX Runtime (the export's own parity
// tolerance; the shared test vectors hold it). A graph with any other op, attribute or shape is refused at
// Load, which also runs it once so that a shape mismatch is found before the first decision.
package actor

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"sync"
)

// ONNX TensorProto data types the graphs use.
const (
	typeFloat  = 1
	typeDouble = 11
)

// Actor is a loaded graph; safe for concurrent use.
type Actor struct {
	steps    []step
	slots    []slot // one per value the graph names: its size and type
	input    int    // the slot of the graph's input
	output   int    // the slot of the graph's output
	metadata map[string]string
	pool     sync.Pool // [][]float64: a call's scratch, one buffer per slot
}

type slot struct {
	size   int
	double bool
	fixed  []float64 // an initializer's or a Constant's values; nil for a computed value
}

type step struct {
	op      string
	in      []int // slots
	out     int
	to      int // Cast: the target type
	transB  bool
	alpha   float64
	beta    float64
	rows    int // Gemm: N outputs
	columns int // Gemm: K inputs
	node    string
}

// Load reads an exported graph: its metadata, initializers and nodes. An error names the node or the
// field that is not what the export writes.
func Load(data []byte) (*Actor, error) {
	m, err := parseModel(data)
	if err != nil {
		return nil, fmt.Errorf("ONNX graph: %w", err)
	}
	if len(m.inputs) != 1 || len(m.outputs) != 1 {
		return nil, fmt.Errorf("ONNX graph: %d inputs and %d outputs: expected one observation and one action",
			len(m.inputs), len(m.outputs))
	}
	a := &Actor{metadata: m.metadata}
	index := map[string]int{}
	add := func(name string, s slot) int {
		index[name] = len(a.slots)
		a.slots = append(a.slots, s)
		return index[name]
	}
	for _, t := range m.initializers {
		if _, dup := index[t.name]; dup {
			return nil, fmt.Errorf("ONNX graph: initializer %q twice", t.name)
		}
		add(t.name, slot{size: len(t.values), double: t.dtype == typeDouble, fixed: t.values})
	}
	width, err := observationWidth(m, a.slots, index)
	if err != nil {
		return nil, fmt.Errorf("ONNX graph: %w", err)
	}
	a.input = add(m.inputs[0], slot{size: width})
	for _, n := range m.nodes {
		s := step{op: n.op, node: fmt.Sprintf("node %q (%s)", n.name, n.op), alpha: 1, beta: 1}
		for _, name := range n.inputs {
			i, ok := index[name]
			if !ok {
				return nil, fmt.Errorf("%s: input %q is not computed before it", s.node, name)
			}
			s.in = append(s.in, i)
		}
		if len(n.outputs) != 1 {
			return nil, fmt.Errorf("%s: %d outputs, expected 1", s.node, len(n.outputs))
		}
		out, err := a.shape(&s, n)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.node, err)
		}
		s.out = add(n.outputs[0], out)
		if s.op != "Constant" {
			a.steps = append(a.steps, s)
		}
	}
	out, ok := index[m.outputs[0]]
	if !ok {
		return nil, fmt.Errorf("ONNX graph: the output %q is never computed", m.outputs[0])
	}
	a.output = out
	a.pool.New = func() any {
		buffers := make([][]float64, len(a.slots))
		for i, s := range a.slots {
			if s.fixed == nil {
				buffers[i] = make([]float64, s.size)
			}
		}
		return buffers
	}
	if _, err := a.Act(make([]float32, a.InputSize())); err != nil {
		return nil, fmt.Errorf("ONNX graph: a zero observation: %w", err)
	}
	return a, nil
}

// shape checks one node and gives its output's slot (a Constant's holds its value).
func (a *Actor) shape(s *step, n node) (slot, error) {
	want := map[string]int{"Cast": 1, "Sub": 2, "Div": 2, "Mul": 2, "Clip": 3, "Constant": 0, "Gemm": 3, "Relu": 1, "Tanh": 1}
	arity, known := want[n.op]
	if !known {
		return slot{}, errors.New("an op this package does not evaluate (it reads td3sched export-onnx's graphs only)")
	}
	if len(s.in) != arity {
		return slot{}, fmt.Errorf("%d inputs, expected %d", len(s.in), arity)
	}
	in := func(i int) slot { return a.slots[s.in[i]] }
	for name, attr := range n.attributes {
		switch {
		case n.op == "Cast" && name == "to":
			s.to = int(attr.i)
		case n.op == "Constant" && name == "value" && attr.t != nil:
		case n.op == "Gemm" && name == "alpha":
			s.alpha = float64(attr.f)
		case n.op == "Gemm" && name == "beta":
			s.beta = float64(attr.f)
		case n.op == "Gemm" && name == "transB":
			s.transB = attr.i == 1
		case n.op == "Gemm" && name == "transA" && attr.i == 0:
		default:
			return slot{}, fmt.Errorf("attribute %q not supported", name)
		}
	}
	switch n.op {
	case "Constant":
		t := n.attributes["value"].t
		if t == nil || (t.dtype != typeFloat && t.dtype != typeDouble) {
			return slot{}, errors.New("expected a float or double value tensor")
		}
		return slot{size: len(t.values), double: t.dtype == typeDouble, fixed: t.values}, nil
	case "Cast":
		if s.to != typeFloat && s.to != typeDouble {
			return slot{}, fmt.Errorf("to=%d: expected float (1) or double (11)", s.to)
		}
		return slot{size: in(0).size, double: s.to == typeDouble}, nil
	case "Relu", "Tanh":
		return slot{size: in(0).size, double: in(0).double}, nil
	case "Sub", "Div", "Mul":
		x, y := in(0), in(1)
		if x.double != y.double {
			return slot{}, errors.New("inputs of different types")
		}
		switch {
		case x.size == y.size || y.size == 1:
			return slot{size: x.size, double: x.double}, nil
		case x.size == 1:
			return slot{size: y.size, double: x.double}, nil
		}
		return slot{}, fmt.Errorf("sizes %d and %d: expected equal sizes or a scalar", x.size, y.size)
	case "Clip":
		if in(1).size != 1 || in(2).size != 1 || in(1).fixed == nil || in(2).fixed == nil {
			return slot{}, errors.New("expected constant scalar min and max")
		}
		return slot{size: in(0).size, double: in(0).double}, nil
	}
	// Gemm: A [1, K], B [N, K] (transB) or [K, N], C [N]
	x, w, c := in(0), in(1), in(2)
	if w.fixed == nil || c.fixed == nil || w.double || c.double || x.double {
		return slot{}, errors.New("expected float A and constant float B and C")
	}
	rows := c.size
	if rows < 1 || w.size%rows != 0 {
		return slot{}, fmt.Errorf("B of %d values and C of %d: expected B of N x K and C of N", w.size, c.size)
	}
	s.rows, s.columns = rows, w.size/rows
	if x.size != s.columns {
		return slot{}, fmt.Errorf("A of %d values: expected K = %d", x.size, s.columns)
	}
	if !s.transB { // keep B as [N, K] rows: the inner loop runs over contiguous K
		t := make([]float64, len(w.fixed))
		for k := range s.columns {
			for j := range rows {
				t[j*s.columns+k] = w.fixed[k*rows+j]
			}
		}
		s.in[1] = len(a.slots)
		a.slots = append(a.slots, slot{size: len(t), fixed: t})
	}
	return slot{size: rows}, nil
}

// observationWidth is the graph's input width: K of the first Gemm (its B is N x K or K x N, its C N);
// the ops before it are element-wise.
func observationWidth(m *model, slots []slot, index map[string]int) (int, error) {
	for _, n := range m.nodes {
		if n.op != "Gemm" || len(n.inputs) != 3 {
			continue
		}
		w, okW := index[n.inputs[1]]
		c, okC := index[n.inputs[2]]
		if !okW || !okC || slots[c].size < 1 || slots[w].size%slots[c].size != 0 {
			return 0, fmt.Errorf("the first Gemm (node %q): expected initializers B of N x K and C of N", n.name)
		}
		return slots[w].size / slots[c].size, nil
	}
	return 0, errors.New("no Gemm: not an exported actor")
}

// InputSize is the observation's width.
func (a *Actor) InputSize() int { return a.slots[a.input].size }

// OutputSize is the action's width.
func (a *Actor) OutputSize() int { return a.slots[a.output].size }

// Metadata is the graph's metadata_props (td3sched.content_sha256, td3sched.action_mode, ...), a copy.
func (a *Actor) Metadata() map[string]string { return maps.Clone(a.metadata) }

// Act is the action for one observation. A NaN in the observation is passed through, not refused: the
// caller checks the action.
func (a *Actor) Act(observation []float32) ([]float32, error) {
	if len(observation) != a.InputSize() {
		return nil, fmt.Errorf("observation of %d values: expected %d", len(observation), a.InputSize())
	}
	buffers := a.pool.Get().([][]float64)
	defer a.pool.Put(buffers)
	value := func(i int) []float64 {
		if f := a.slots[i].fixed; f != nil {
			return f
		}
		return buffers[i]
	}
	for i, x := range observation {
		buffers[a.input][i] = float64(x)
	}
	for _, s := range a.steps {
		out, x := buffers[s.out], value(s.in[0])
		switch s.op {
		case "Cast", "Relu", "Tanh":
			for i, v := range x {
				switch s.op {
				case "Relu":
					v = math.Max(v, 0)
				case "Tanh":
					v = math.Tanh(v)
				}
				out[i] = v
			}
		case "Sub", "Div", "Mul":
			y := value(s.in[1])
			for i := range out {
				u, v := x[min(i, len(x)-1)], y[min(i, len(y)-1)]
				switch s.op {
				case "Sub":
					out[i] = u - v
				case "Div":
					out[i] = u / v
				default:
					out[i] = u * v
				}
			}
		case "Clip":
			lo, hi := value(s.in[1])[0], value(s.in[2])[0]
			for i, v := range x {
				out[i] = math.Min(math.Max(v, lo), hi)
			}
		case "Gemm":
			w, c := value(s.in[1]), value(s.in[2])
			for j := range s.rows {
				out[j] = s.alpha*dot(w[j*s.columns:(j+1)*s.columns], x) + s.beta*c[j]
			}
		}
		if !a.slots[s.out].double {
			for i, v := range out {
				out[i] = float64(float32(v))
			}
		}
	}
	result := make([]float32, a.OutputSize())
	for i, v := range value(a.output) {
		result[i] = float32(v)
	}
	return result, nil
}

// dot is the dot product of row and x (len(x) >= len(row)), over four running sums: they break the
// addition's dependency chain (twice the speed of one sum), in float64 like the one sum.
func dot(row, x []float64) float64 {
	x = x[:len(row)]
	var s0, s1, s2, s3 float64
	k := 0
	for ; k+4 <= len(row); k += 4 {
		s0 += row[k] * x[k]
		s1 += row[k+1] * x[k+1]
		s2 += row[k+2] * x[k+2]
		s3 += row[k+3] * x[k+3]
	}
	for ; k < len(row); k++ {
		s0 += row[k] * x[k]
	}
	return (s0 + s1) + (s2 + s3)
}

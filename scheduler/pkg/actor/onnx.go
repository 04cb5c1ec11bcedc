package actor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// What Load reads of an ONNX ModelProto (onnx/onnx.proto; field numbers below), nothing else.
type model struct {
	metadata     map[string]string
	nodes        []node
	initializers []tensor
	inputs       []string
	outputs      []string
}

type node struct {
	name, op        string
	inputs, outputs []string
	attributes      map[string]attribute
}

type attribute struct {
	f float32
	i int64
	t *tensor
}

type tensor struct {
	name   string
	dtype  int64
	dims   []int64
	values []float64
}

// fields calls fn for every field of a message; an error on a malformed one.
func fields(b []byte, fn func(num protowire.Number, typ protowire.Type, value []byte, varint uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var value []byte
		var varint uint64
		switch typ {
		case protowire.VarintType:
			varint, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			value, n = protowire.ConsumeBytes(b)
		case protowire.Fixed32Type:
			var v uint32
			v, n = protowire.ConsumeFixed32(b)
			varint = uint64(v)
		case protowire.Fixed64Type:
			varint, n = protowire.ConsumeFixed64(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := fn(num, typ, value, varint); err != nil {
			return err
		}
	}
	return nil
}

func parseModel(b []byte) (*model, error) {
	m := &model{metadata: map[string]string{}}
	var graph []byte
	err := fields(b, func(num protowire.Number, typ protowire.Type, value []byte, _ uint64) error {
		switch {
		case num == 7 && typ == protowire.BytesType: // ModelProto.graph
			graph = value
		case num == 14 && typ == protowire.BytesType: // ModelProto.metadata_props
			var key, val string
			if err := fields(value, func(n protowire.Number, t protowire.Type, v []byte, _ uint64) error {
				if t == protowire.BytesType && n == 1 {
					key = string(v)
				} else if t == protowire.BytesType && n == 2 {
					val = string(v)
				}
				return nil
			}); err != nil {
				return fmt.Errorf("metadata_props: %w", err)
			}
			m.metadata[key] = val
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if graph == nil {
		return nil, errors.New("no graph")
	}
	err = fields(graph, func(num protowire.Number, typ protowire.Type, value []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1: // GraphProto.node
			n, err := parseNode(value)
			if err != nil {
				return fmt.Errorf("node %d: %w", len(m.nodes), err)
			}
			m.nodes = append(m.nodes, n)
		case 5: // GraphProto.initializer
			t, err := parseTensor(value)
			if err != nil {
				return fmt.Errorf("initializer %d: %w", len(m.initializers), err)
			}
			m.initializers = append(m.initializers, t)
		case 11, 12: // GraphProto.input, output: ValueInfoProto, name = 1
			var name string
			if err := fields(value, func(n protowire.Number, t protowire.Type, v []byte, _ uint64) error {
				if n == 1 && t == protowire.BytesType {
					name = string(v)
				}
				return nil
			}); err != nil {
				return err
			}
			if num == 11 {
				m.inputs = append(m.inputs, name)
			} else {
				m.outputs = append(m.outputs, name)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("graph: %w", err)
	}
	if len(m.nodes) == 0 {
		return nil, errors.New("graph: no nodes")
	}
	return m, nil
}

func parseNode(b []byte) (node, error) {
	n := node{attributes: map[string]attribute{}}
	err := fields(b, func(num protowire.Number, typ protowire.Type, value []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1: // NodeProto.input
			n.inputs = append(n.inputs, string(value))
		case 2: // NodeProto.output
			n.outputs = append(n.outputs, string(value))
		case 3: // NodeProto.name
			n.name = string(value)
		case 4: // NodeProto.op_type
			n.op = string(value)
		case 5: // NodeProto.attribute
			name, attr, err := parseAttribute(value)
			if err != nil {
				return fmt.Errorf("attribute: %w", err)
			}
			n.attributes[name] = attr
		}
		return nil
	})
	return n, err
}

func parseAttribute(b []byte) (string, attribute, error) {
	var name string
	var a attribute
	err := fields(b, func(num protowire.Number, typ protowire.Type, value []byte, varint uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType: // AttributeProto.name
			name = string(value)
		case num == 2 && typ == protowire.Fixed32Type: // f
			a.f = math.Float32frombits(uint32(varint))
		case num == 3 && typ == protowire.VarintType: // i
			a.i = int64(varint)
		case num == 5 && typ == protowire.BytesType: // t
			t, err := parseTensor(value)
			if err != nil {
				return err
			}
			a.t = &t
		}
		return nil
	})
	return name, a, err
}

// parseTensor reads a float or double tensor (raw_data little-endian, or float_data / double_data).
func parseTensor(b []byte) (tensor, error) {
	var t tensor
	var raw []byte
	var floats, doubles []byte
	err := fields(b, func(num protowire.Number, typ protowire.Type, value []byte, varint uint64) error {
		switch {
		case num == 1 && typ == protowire.VarintType: // dims, unpacked
			t.dims = append(t.dims, int64(varint))
		case num == 1 && typ == protowire.BytesType: // dims, packed
			for len(value) > 0 {
				v, n := protowire.ConsumeVarint(value)
				if n < 0 {
					return protowire.ParseError(n)
				}
				t.dims, value = append(t.dims, int64(v)), value[n:]
			}
		case num == 2 && typ == protowire.VarintType: // data_type
			t.dtype = int64(varint)
		case num == 4 && typ == protowire.BytesType: // float_data, packed
			floats = append(floats, value...)
		case num == 8 && typ == protowire.BytesType: // name
			t.name = string(value)
		case num == 9 && typ == protowire.BytesType: // raw_data
			raw = value
		case num == 10 && typ == protowire.BytesType: // double_data, packed
			doubles = append(doubles, value...)
		}
		return nil
	})
	if err != nil {
		return t, err
	}
	size := int64(1)
	for _, d := range t.dims {
		if d < 0 || d > 1<<24 {
			return t, fmt.Errorf("tensor %q: dimension %d", t.name, d)
		}
		size *= d
	}
	if size > 1<<24 {
		return t, fmt.Errorf("tensor %q: %d values", t.name, size)
	}
	width := map[int64]int{typeFloat: 4, typeDouble: 8}[t.dtype]
	if width == 0 {
		return t, fmt.Errorf("tensor %q: data type %d, expected float (1) or double (11)", t.name, t.dtype)
	}
	data := raw
	if data == nil {
		data = floats
		if t.dtype == typeDouble {
			data = doubles
		}
	}
	if int64(len(data)) != size*int64(width) {
		return t, fmt.Errorf("tensor %q: %d bytes for %d values of %d bytes", t.name, len(data), size, width)
	}
	t.values = make([]float64, size)
	for i := range t.values {
		if width == 4 {
			t.values[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:])))
		} else {
			t.values[i] = math.Float64frombits(binary.LittleEndian.Uint64(data[8*i:]))
		}
	}
	return t, nil
}

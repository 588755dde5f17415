package httpserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The codecs below replace Connect's built-in "proto" and "json" codecs with
// the same encodings, for one reason: when a request is refused for invalid
// UTF-8, protobuf-go's error does not say which field held it. Bad input
// must name its field ("key: must be valid UTF-8"), so on that error the
// codecs look for the field themselves.

type protoCodec struct{}

func (protoCodec) Name() string { return "proto" }

func (protoCodec) Marshal(m any) ([]byte, error) {
	msg, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a proto.Message", m)
	}
	return proto.Marshal(msg)
}

func (protoCodec) Unmarshal(data []byte, m any) error {
	msg, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a proto.Message", m)
	}
	err := proto.Unmarshal(data, msg)
	if err != nil && strings.Contains(err.Error(), "UTF-8") {
		if f := badUTF8Wire(msg.ProtoReflect().Descriptor(), data); f != "" {
			return fmt.Errorf("%s: must be valid UTF-8", f)
		}
	}
	return err
}

// badUTF8Wire names the first top-level string field of desc whose value in
// the wire bytes is not UTF-8.
func badUTF8Wire(desc protoreflect.MessageDescriptor, b []byte) string {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		if typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return ""
			}
			if fd := desc.Fields().ByNumber(num); fd != nil && fd.Kind() == protoreflect.StringKind && !utf8.Valid(v) {
				return string(fd.Name())
			}
			b = b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return ""
		}
		b = b[m:]
	}
	return ""
}

type jsonCodec struct{}

func (jsonCodec) Name() string { return "json" }

func (jsonCodec) Marshal(m any) ([]byte, error) {
	msg, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a proto.Message", m)
	}
	return protojson.Marshal(msg)
}

func (jsonCodec) Unmarshal(data []byte, m any) error {
	msg, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a proto.Message", m)
	}
	if len(data) == 0 {
		return errors.New("zero-length payload is not a valid JSON object")
	}
	err := protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(data, msg)
	if err != nil && strings.Contains(err.Error(), "UTF-8") {
		if f := badUTF8JSON(msg.ProtoReflect().Descriptor(), data); f != "" {
			return fmt.Errorf("%s: must be valid UTF-8", f)
		}
	}
	return err
}

// badUTF8JSON names the first top-level field of a JSON object whose raw
// value is not UTF-8 (encoding/json keeps raw values' bytes as they came).
func badUTF8JSON(desc protoreflect.MessageDescriptor, data []byte) string {
	var obj map[string]json.RawMessage
	if json.Unmarshal(data, &obj) != nil {
		return ""
	}
	for k, v := range obj {
		if utf8.Valid(v) {
			continue
		}
		if fd := desc.Fields().ByJSONName(k); fd != nil {
			return string(fd.Name())
		}
		if fd := desc.Fields().ByName(protoreflect.Name(k)); fd != nil {
			return string(fd.Name())
		}
		return "a field"
	}
	return ""
}

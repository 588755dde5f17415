package httpserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The codecs below replace Connect's built-in "proto" and "json" codecs with
// the same encodings, for two reasons:
//
//   - When a request is refused for invalid UTF-8, protobuf-go's error does
//     not say which field held it. Bad input must name its field ("key:
//     must be valid UTF-8"), so on that error the codecs look for the field
//     themselves.
//   - A JSON request with a field the message does not have is refused
//     (invalid_argument, naming the field and the ones it could be), where
//     Connect's own codec drops it. JSON is what people type (curl,
//     scripts): a misspelled "wiat" would silently turn a wait into a single
//     try, and no lock request is better served by guessing. The SDKs are
//     generated from the same messages and send only fields they have. In
//     binary protobuf, unknown fields are ignored as protobuf defines: its
//     fields are numbered by generated code, so there is no typo to catch,
//     and a newer client keeps working against an older server.

type protoCodec struct{ shared *sharedEncodings }

func (protoCodec) Name() string { return "proto" }

func (c protoCodec) Marshal(m any) ([]byte, error) { return c.MarshalAppend(nil, m) }

// MarshalAppend is what Connect calls (into a buffer of its pool).
func (c protoCodec) MarshalAppend(dst []byte, m any) ([]byte, error) {
	msg, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a proto.Message", m)
	}
	return c.shared.appendEncoding(dst, msg, proto.MarshalOptions{}.MarshalAppend)
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

type jsonCodec struct{ shared *sharedEncodings }

func (jsonCodec) Name() string { return "json" }

func (c jsonCodec) Marshal(m any) ([]byte, error) { return c.MarshalAppend(nil, m) }

// MarshalAppend is what Connect calls (into a buffer of its pool).
func (c jsonCodec) MarshalAppend(dst []byte, m any) ([]byte, error) {
	msg, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a proto.Message", m)
	}
	return c.shared.appendEncoding(dst, msg, protojson.MarshalOptions{}.MarshalAppend)
}

func (jsonCodec) Unmarshal(data []byte, m any) error {
	msg, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a proto.Message", m)
	}
	if len(data) == 0 {
		return errors.New("zero-length payload is not a valid JSON object")
	}
	err := protojson.Unmarshal(data, msg)
	switch {
	case err == nil:
	case strings.Contains(err.Error(), "UTF-8"):
		if f := badUTF8JSON(msg.ProtoReflect().Descriptor(), data); f != "" {
			return fmt.Errorf("%s: must be valid UTF-8", f)
		}
	case strings.Contains(err.Error(), "unknown field"):
		if f := unknownJSONField(msg.ProtoReflect().Descriptor(), data); f != "" {
			return fmt.Errorf("%q: unknown field; %s has %s", f, msg.ProtoReflect().Descriptor().Name(), fieldNames(msg.ProtoReflect().Descriptor()))
		}
	}
	return err
}

// unknownJSONField names the first top-level key of a JSON object that is
// not a field of desc (by its JSON or its proto name).
func unknownJSONField(desc protoreflect.MessageDescriptor, data []byte) string {
	var obj map[string]json.RawMessage
	if json.Unmarshal(data, &obj) != nil {
		return ""
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if desc.Fields().ByJSONName(k) == nil && desc.Fields().ByName(protoreflect.Name(k)) == nil {
			return k
		}
	}
	return ""
}

// fieldNames lists desc's fields by their JSON names: "key, ttl, wait".
func fieldNames(desc protoreflect.MessageDescriptor) string {
	names := make([]string, desc.Fields().Len())
	for i := range names {
		names[i] = desc.Fields().Get(i).JSONName()
	}
	return strings.Join(names, ", ")
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

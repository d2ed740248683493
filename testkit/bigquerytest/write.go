package bigquerytest

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/bigquery/storage/apiv1/storagepb"
	"github.com/jackc/pgx/v5/pgconn"
	bq "google.golang.org/api/bigquery/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

type writeStream struct {
	name      string
	dataset   string
	table     string
	typ       storagepb.WriteStream_Type
	created   time.Time
	rows      [][]*string // PostgreSQL text of each table column, nil for NULL
	finalized bool
	committed bool
	def       bool // the table's _default stream
}

type writeService struct {
	storagepb.UnimplementedBigQueryWriteServer
	s *Server
}

var parentRE = regexp.MustCompile(`^projects/([^/]+)/datasets/([^/]+)/tables/([^/]+)$`)

func (w *writeService) table(parent string) (*tableMeta, string, string, error) {
	m := parentRE.FindStringSubmatch(parent)
	if m == nil {
		return nil, "", "", status.Errorf(codes.InvalidArgument, "invalid table name %q", parent)
	}
	if m[1] != w.s.Project {
		return nil, "", "", status.Errorf(codes.NotFound, "Project %s not found", m[1])
	}
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	t, ok := w.s.tables[m[2]+"."+m[3]]
	if !ok {
		return nil, "", "", status.Errorf(codes.NotFound, "Table %s not found", parent)
	}
	return t, m[2], m[3], nil
}

func (w *writeService) CreateWriteStream(ctx context.Context, req *storagepb.CreateWriteStreamRequest) (*storagepb.WriteStream, error) {
	if _, _, _, err := w.table(req.GetParent()); err != nil {
		return nil, err
	}
	if req.GetWriteStream().GetType() != storagepb.WriteStream_PENDING {
		return nil, status.Errorf(codes.Unimplemented, "the stand-in serves PENDING write streams (and the _default stream) only, not %s", req.GetWriteStream().GetType())
	}
	m := parentRE.FindStringSubmatch(req.GetParent())
	ws := &writeStream{name: req.GetParent() + "/streams/" + newID("s"), dataset: m[2], table: m[3], typ: storagepb.WriteStream_PENDING, created: time.Now()}
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	hour := ws.created.Unix() / 3600
	if w.s.created[hour] >= w.s.streamQuota {
		// The message BigQuery sends (seen in users' reports), with the status gRPC gives it.
		return nil, status.Errorf(codes.ResourceExhausted, "Exceeds 'CreateWriteStream requests' quota, user_id: project_%s (status: INSUFFICIENT_TOKENS), you can issue a raise quota request through Google Cloud Console.", w.s.Project)
	}
	w.s.created[hour]++
	w.s.streams[ws.name] = ws
	return ws.proto(), nil
}

func (ws *writeStream) proto() *storagepb.WriteStream {
	return &storagepb.WriteStream{Name: ws.name, Type: ws.typ, CreateTime: timestamppb.New(ws.created), Location: "US",
		WriteMode: storagepb.WriteStream_INSERT}
}

func (w *writeService) stream(name string) (*writeStream, error) {
	if parent, ok := strings.CutSuffix(name, "/streams/_default"); ok {
		// Every table has a default stream; it needs no CreateWriteStream and its rows are committed as each
		// append is acknowledged (at-least-once: no offsets).
		if _, dataset, table, err := w.table(parent); err != nil {
			return nil, err
		} else {
			return &writeStream{name: name, dataset: dataset, table: table, typ: storagepb.WriteStream_COMMITTED, def: true, created: time.Now()}, nil
		}
	}
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	ws, ok := w.s.streams[name]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "Requested entity was not found. Entity: %s", name)
	}
	return ws, nil
}

func (w *writeService) GetWriteStream(ctx context.Context, req *storagepb.GetWriteStreamRequest) (*storagepb.WriteStream, error) {
	ws, err := w.stream(req.GetName())
	if err != nil {
		return nil, err
	}
	return ws.proto(), nil
}

func (w *writeService) FinalizeWriteStream(ctx context.Context, req *storagepb.FinalizeWriteStreamRequest) (*storagepb.FinalizeWriteStreamResponse, error) {
	ws, err := w.stream(req.GetName())
	if err != nil {
		return nil, err
	}
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	ws.finalized = true
	return &storagepb.FinalizeWriteStreamResponse{RowCount: int64(len(ws.rows))}, nil
}

// BatchCommitWriteStreams makes the rows of finalized pending streams visible, all in one transaction.
func (w *writeService) BatchCommitWriteStreams(ctx context.Context, req *storagepb.BatchCommitWriteStreamsRequest) (*storagepb.BatchCommitWriteStreamsResponse, error) {
	t, dataset, table, err := w.table(req.GetParent())
	if err != nil {
		return nil, err
	}
	var streams []*writeStream
	var errs []*storagepb.StorageError
	for _, name := range req.GetWriteStreams() {
		ws, err := w.stream(name)
		switch {
		case err != nil:
			errs = append(errs, &storagepb.StorageError{Code: storagepb.StorageError_STREAM_NOT_FOUND, Entity: name, ErrorMessage: "stream not found"})
		case !ws.finalized:
			errs = append(errs, &storagepb.StorageError{Code: storagepb.StorageError_INVALID_STREAM_STATE, Entity: name, ErrorMessage: "stream is not finalized"})
		case ws.committed:
			errs = append(errs, &storagepb.StorageError{Code: storagepb.StorageError_STREAM_ALREADY_COMMITTED, Entity: name, ErrorMessage: "stream is already committed"})
		case ws.dataset != dataset || ws.table != table:
			errs = append(errs, &storagepb.StorageError{Code: storagepb.StorageError_INVALID_STREAM_STATE, Entity: name, ErrorMessage: "stream belongs to another table"})
		default:
			streams = append(streams, ws)
		}
	}
	if len(errs) > 0 {
		return &storagepb.BatchCommitWriteStreamsResponse{StreamErrors: errs}, nil
	}
	// Carried out whether or not the client waits, as serveREST's requests: a commit cut short by a
	// disconnect could land in PostgreSQL with its streams still marked uncommitted.
	ctx = context.WithoutCancel(ctx)
	w.s.txMu.Lock()
	defer w.s.txMu.Unlock()
	tx, err := w.s.pool.Begin(ctx)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	for _, ws := range streams {
		if err := insertRows(ctx, tx, t, dataset, table, ws.rows); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "commit %s: %v", ws.name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, status.Error(codes.Aborted, err.Error())
	}
	w.s.mu.Lock()
	for _, ws := range streams {
		ws.committed = true
	}
	w.s.mu.Unlock()
	return &storagepb.BatchCommitWriteStreamsResponse{CommitTime: timestamppb.Now()}, nil
}

// insertRows inserts rows (PostgreSQL text per column of t) into dataset.table.
func insertRows(ctx context.Context, tx interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, t *tableMeta, dataset, table string, rows [][]*string) error {
	casts := make([]string, len(t.cols))
	names := make([]string, len(t.cols))
	for i, c := range t.cols {
		pt, _ := pgType(c)
		casts[i], names[i] = pt, pgIdent(c.Name)
	}
	per := max(1, 60000/max(1, len(t.cols)))
	for start := 0; start < len(rows); start += per {
		chunk := rows[start:min(len(rows), start+per)]
		var (
			b    strings.Builder
			args []any
		)
		fmt.Fprintf(&b, "INSERT INTO %s.%s (%s) VALUES ", pgIdent(dataset), pgIdent(table), strings.Join(names, ", "))
		for r, row := range chunk {
			if r > 0 {
				b.WriteString(", ")
			}
			b.WriteByte('(')
			for c, v := range row {
				if c > 0 {
					b.WriteString(", ")
				}
				args = append(args, v)
				fmt.Fprintf(&b, "$%d::text::%s", len(args), casts[c])
			}
			b.WriteByte(')')
		}
		if _, err := tx.Exec(ctx, b.String(), args...); err != nil {
			return err
		}
	}
	return nil
}

// AppendRows takes rows in the writer's protobuf schema, checked against the table's columns.
func (w *writeService) AppendRows(srv storagepb.BigQueryWrite_AppendRowsServer) error {
	var (
		ws  *writeStream
		md  protoreflect.MessageDescriptor
		dec []colDecoder
	)
	for {
		req, err := srv.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if name := req.GetWriteStream(); name != "" && (ws == nil || ws.name != name) {
			if ws, err = w.stream(name); err != nil {
				return err
			}
			md, dec = nil, nil
		}
		if ws == nil {
			return status.Error(codes.InvalidArgument, "the first AppendRows request must name the write stream")
		}
		rows := req.GetProtoRows()
		if rows == nil {
			return status.Error(codes.InvalidArgument, "the stand-in takes proto_rows only")
		}
		if d := rows.GetWriterSchema().GetProtoDescriptor(); d != nil {
			t, _, _, err := w.table(strings.Join(strings.Split(ws.name, "/")[:6], "/"))
			if err != nil {
				return err
			}
			if md, dec, err = decoders(d, t.cols); err != nil {
				return status.Error(codes.InvalidArgument, err.Error())
			}
		}
		if md == nil {
			return status.Error(codes.InvalidArgument, "the first AppendRows request of a connection must carry writer_schema")
		}
		resp := w.append(srv.Context(), ws, md, dec, req)
		resp.WriteStream = ws.name
		if err := srv.Send(resp); err != nil {
			return err
		}
	}
}

func (w *writeService) append(ctx context.Context, ws *writeStream, md protoreflect.MessageDescriptor, dec []colDecoder, req *storagepb.AppendRowsRequest) *storagepb.AppendRowsResponse {
	fail := func(c codes.Code, format string, args ...any) *storagepb.AppendRowsResponse {
		return &storagepb.AppendRowsResponse{Response: &storagepb.AppendRowsResponse_Error{Error: status.Newf(c, format, args...).Proto()}}
	}
	var batch [][]*string
	for i, b := range req.GetProtoRows().GetRows().GetSerializedRows() {
		msg := dynamicpb.NewMessage(md)
		if err := (proto.UnmarshalOptions{}).Unmarshal(b, msg); err != nil {
			return fail(codes.InvalidArgument, "row %d: cannot decode with the writer schema: %v", i, err)
		}
		// A value whose wire type differs from its field's lands in the unknown fields, where a writer's
		// encoding bug would vanish as a NULL: refuse it.
		if len(msg.GetUnknown()) > 0 {
			return fail(codes.InvalidArgument, "row %d: %d bytes that do not match the writer schema's fields", i, len(msg.GetUnknown()))
		}
		row := make([]*string, len(dec))
		for c, d := range dec {
			v, err := d(msg)
			if err != nil {
				return fail(codes.InvalidArgument, "row %d: %v", i, err)
			}
			row[c] = v
		}
		batch = append(batch, row)
	}
	if ws.def {
		if req.GetOffset() != nil {
			return fail(codes.InvalidArgument, "offsets are not supported on the default stream %s", ws.name)
		}
		t, _, _, err := w.table(strings.TrimSuffix(ws.name, "/streams/_default"))
		if err != nil {
			return fail(codes.NotFound, "%v", err)
		}
		if err := insertRows(ctx, w.s.pool, t, ws.dataset, ws.table, batch); err != nil {
			return fail(codes.InvalidArgument, "append to %s: %v", ws.name, err)
		}
		return &storagepb.AppendRowsResponse{Response: &storagepb.AppendRowsResponse_AppendResult_{
			AppendResult: &storagepb.AppendRowsResponse_AppendResult{}}}
	}
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	if ws.finalized {
		return fail(codes.InvalidArgument, "Stream is finalized: %s", ws.name)
	}
	next := int64(len(ws.rows))
	if req.GetOffset() != nil {
		switch off := req.GetOffset().GetValue(); {
		case off < next:
			return fail(codes.AlreadyExists, "The offset is within stream, expected offset %d, received %d", next, off)
		case off > next:
			return fail(codes.OutOfRange, "The offset is beyond stream, expected offset %d, received %d", next, off)
		}
	}
	ws.rows = append(ws.rows, batch...)
	return &storagepb.AppendRowsResponse{Response: &storagepb.AppendRowsResponse_AppendResult_{
		AppendResult: &storagepb.AppendRowsResponse_AppendResult{Offset: wrapperspb.Int64(next)}}}
}

// colDecoder reads one table column from a decoded row as PostgreSQL text (nil: NULL).
type colDecoder func(msg protoreflect.Message) (*string, error)

// decoders checks the writer's descriptor against the table's columns — every field names a column, with a
// wire type BigQuery documents for the column's type — and returns a decoder per column.
func decoders(dp *descriptorpb.DescriptorProto, cols []*bq.TableFieldSchema) (protoreflect.MessageDescriptor, []colDecoder, error) {
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{Name: proto.String("writer.proto"), Syntax: proto.String("proto2"),
		MessageType: []*descriptorpb.DescriptorProto{dp}}, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("invalid proto schema: %v", err)
	}
	md := fd.Messages().Get(0)
	byName := map[string]protoreflect.FieldDescriptor{}
	for i := 0; i < md.Fields().Len(); i++ {
		f := md.Fields().Get(i)
		found := false
		for _, c := range cols {
			if strings.EqualFold(c.Name, string(f.Name())) {
				found = true
			}
		}
		if !found {
			return nil, nil, fmt.Errorf("Input schema has more fields than BigQuery schema, extra fields: '%s'", f.Name())
		}
		byName[strings.ToLower(string(f.Name()))] = f
	}
	dec := make([]colDecoder, len(cols))
	for i, c := range cols {
		f, ok := byName[strings.ToLower(c.Name)]
		if !ok {
			if c.Mode == "REQUIRED" {
				return nil, nil, fmt.Errorf("required field %s is not in the writer schema", c.Name)
			}
			dec[i] = func(protoreflect.Message) (*string, error) { return nil, nil }
			continue
		}
		if err := compatible(c, f); err != nil {
			return nil, nil, err
		}
		c, f := c, f
		dec[i] = func(m protoreflect.Message) (*string, error) {
			if f.IsList() {
				l := m.Get(f).List()
				vals := make([]any, l.Len())
				for j := range vals {
					v, err := jsonValue(c, f, l.Get(j))
					if err != nil {
						return nil, fmt.Errorf("column %s: %v", c.Name, err)
					}
					vals[j] = v
				}
				b, _ := json.Marshal(vals)
				s := string(b)
				return &s, nil
			}
			if !m.Has(f) {
				if c.Mode == "REQUIRED" {
					return nil, fmt.Errorf("required column %s is missing", c.Name)
				}
				return nil, nil
			}
			if canonical(c.Type) == "STRUCT" {
				v, err := jsonValue(c, f, m.Get(f))
				if err != nil {
					return nil, fmt.Errorf("column %s: %v", c.Name, err)
				}
				b, _ := json.Marshal(v)
				s := string(b)
				return &s, nil
			}
			s, err := text(c, f, m.Get(f))
			if err != nil {
				return nil, fmt.Errorf("column %s: %v", c.Name, err)
			}
			return &s, nil
		}
	}
	return md, dec, nil
}

// compatible checks a field's wire type against the column's type ("Supported protocol buffer data types").
func compatible(c *bq.TableFieldSchema, f protoreflect.FieldDescriptor) error {
	if (c.Mode == "REPEATED") != f.IsList() {
		return fmt.Errorf("field %s: repeated is %v, but the column's mode is %q", c.Name, f.IsList(), c.Mode)
	}
	k := f.Kind()
	ok := false
	switch canonical(c.Type) {
	case "INT64":
		ok = k == protoreflect.Int64Kind || k == protoreflect.Int32Kind || k == protoreflect.Uint32Kind || k == protoreflect.Sint64Kind || k == protoreflect.Sfixed64Kind
	case "FLOAT64":
		ok = k == protoreflect.DoubleKind || k == protoreflect.FloatKind
	case "BOOL":
		ok = k == protoreflect.BoolKind
	case "STRING", "JSON":
		ok = k == protoreflect.StringKind
	case "BYTES":
		ok = k == protoreflect.BytesKind
	case "NUMERIC", "BIGNUMERIC":
		ok = k == protoreflect.StringKind
	case "DATE":
		ok = k == protoreflect.Int32Kind || k == protoreflect.StringKind
	case "TIME", "DATETIME":
		ok = k == protoreflect.StringKind
	case "TIMESTAMP":
		ok = k == protoreflect.Int64Kind || k == protoreflect.StringKind
	case "STRUCT":
		if k != protoreflect.MessageKind {
			break
		}
		ok = true
		sub := f.Message()
		for i := 0; i < sub.Fields().Len(); i++ {
			sf := sub.Fields().Get(i)
			var col *bq.TableFieldSchema
			for _, x := range c.Fields {
				if strings.EqualFold(x.Name, string(sf.Name())) {
					col = x
				}
			}
			if col == nil {
				return fmt.Errorf("field %s.%s is not in the column's STRUCT", c.Name, sf.Name())
			}
			if err := compatible(col, sf); err != nil {
				return err
			}
		}
	}
	if !ok {
		return fmt.Errorf("field %s has proto type %s, which cannot hold BigQuery type %s", c.Name, k, c.Type)
	}
	return nil
}

var numericRE = regexp.MustCompile(`^[+-]?(\d*)(?:\.(\d*))?$`)

// text renders a scalar as PostgreSQL input text, refusing what BigQuery refuses.
func text(c *bq.TableFieldSchema, f protoreflect.FieldDescriptor, v protoreflect.Value) (string, error) {
	switch canonical(c.Type) {
	case "INT64":
		if f.Kind() == protoreflect.Uint32Kind {
			return strconv.FormatUint(v.Uint(), 10), nil
		}
		return strconv.FormatInt(v.Int(), 10), nil
	case "FLOAT64":
		x := v.Float()
		switch {
		case math.IsNaN(x):
			return "NaN", nil
		case math.IsInf(x, 1):
			return "Infinity", nil
		case math.IsInf(x, -1):
			return "-Infinity", nil
		}
		return strconv.FormatFloat(x, 'g', -1, 64), nil
	case "BOOL":
		return strconv.FormatBool(v.Bool()), nil
	case "STRING":
		return v.String(), nil
	case "JSON":
		if !json.Valid([]byte(v.String())) {
			return "", fmt.Errorf("invalid JSON %q", v.String())
		}
		return v.String(), nil
	case "BYTES":
		return `\x` + hex.EncodeToString(v.Bytes()), nil
	case "NUMERIC", "BIGNUMERIC":
		s := v.String()
		m := numericRE.FindStringSubmatch(s)
		intMax, scaleMax := 29, 9
		if canonical(c.Type) == "BIGNUMERIC" {
			intMax, scaleMax = 38, 38
		}
		if m == nil || (m[1] == "" && m[2] == "") || len(strings.TrimLeft(m[1], "0")) > intMax || len(m[2]) > scaleMax {
			return "", fmt.Errorf("invalid %s value %q", c.Type, s)
		}
		return s, nil
	case "DATE":
		if f.Kind() == protoreflect.Int32Kind {
			return time.Unix(v.Int()*86400, 0).UTC().Format("2006-01-02"), nil
		}
		return v.String(), nil
	case "TIME", "DATETIME":
		return v.String(), nil
	case "TIMESTAMP":
		if f.Kind() == protoreflect.Int64Kind {
			us := v.Int()
			if us < -62135596800000000 || us > 253402300799999999 {
				return "", fmt.Errorf("timestamp %d µs is outside 0001-01-01 … 9999-12-31", us)
			}
			return time.UnixMicro(us).UTC().Format("2006-01-02 15:04:05.999999") + "+00", nil
		}
		return v.String(), nil
	}
	return "", fmt.Errorf("no text for %s", c.Type)
}

// jsonValue renders a value of a STRUCT or ARRAY column as JSON, the way the stand-in stores nested values.
func jsonValue(c *bq.TableFieldSchema, f protoreflect.FieldDescriptor, v protoreflect.Value) (any, error) {
	switch canonical(c.Type) {
	case "STRUCT":
		m := v.Message()
		out := map[string]any{}
		for _, sc := range c.Fields {
			sf := m.Descriptor().Fields().ByName(protoreflect.Name(sc.Name))
			if sf == nil {
				out[sc.Name] = nil
				continue
			}
			if sf.IsList() {
				l := m.Get(sf).List()
				vals := make([]any, l.Len())
				for j := range vals {
					x, err := jsonValue(sc, sf, l.Get(j))
					if err != nil {
						return nil, err
					}
					vals[j] = x
				}
				out[sc.Name] = vals
				continue
			}
			if !m.Has(sf) {
				out[sc.Name] = nil
				continue
			}
			x, err := jsonValue(sc, sf, m.Get(sf))
			if err != nil {
				return nil, err
			}
			out[sc.Name] = x
		}
		return out, nil
	case "INT64":
		return json.Number(strconv.FormatInt(v.Int(), 10)), nil
	case "FLOAT64":
		if math.IsNaN(v.Float()) || math.IsInf(v.Float(), 0) {
			return strconv.FormatFloat(v.Float(), 'g', -1, 64), nil
		}
		return v.Float(), nil
	case "BOOL":
		return v.Bool(), nil
	case "BYTES":
		return base64.StdEncoding.EncodeToString(v.Bytes()), nil
	case "JSON":
		var x any
		if err := json.Unmarshal([]byte(v.String()), &x); err != nil {
			return nil, fmt.Errorf("invalid JSON %q", v.String())
		}
		return x, nil
	}
	return text(c, f, v)
}

// The page speaks the public API through the TypeScript code that
// `make generate` writes for sdk-ts (protoc-gen-es): one generated copy in the
// repository, no second code generation step. The bundler (build.mjs)
// resolves the generated file's own imports (@bufbuild/protobuf) from
// web/node_modules, so one copy of the runtime ends up in the bundle.
export * from "../../sdk-ts/src/gen/holdfast/lock/v1/lock_pb.js";

// Explicit browser entry point ("@holdfast/sdk/web").
export * from "./index.js";

// The hand-written declarations against the code they describe. `tsc` checks that a program
// using `split-client.d.ts` type-checks (tests/types-check.ts); this checks that the code has
// what the declarations promise: every method declared on `SplitClient` and `DeviceGroup`
// exists on each class that implements it (the client on the page's thread and its handle on a
// worker; a group joined here and one joined from a worker), every property is a getter or set
// by the class, and every value the module is declared to export, it exports. A method added
// to one side and not the other, or renamed in the code only, fails here.
// Run by `./run.sh test` (no browser needed: the modules are only imported and read).

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import ts from "typescript";

const web = new URL("../", import.meta.url);
const read = (path) => readFileSync(new URL(path, web), "utf8");
const declarations = ts.createSourceFile("split-client.d.ts", read("split-client.d.ts"), ts.ScriptTarget.ES2022, true);

/** The members declared on class or interface `name`: { name, kind, isStatic, optional }. */
function declared(name) {
  const node = declarations.statements.find((s) =>
    (ts.isClassDeclaration(s) || ts.isInterfaceDeclaration(s)) && s.name?.text === name);
  assert.ok(node, `split-client.d.ts declares ${name}`);
  return node.members.filter((m) => m.name).map((m) => ({
    name: m.name.getText(declarations),
    kind: ts.isMethodDeclaration(m) || ts.isMethodSignature(m) ? "method"
      : ts.isConstructorDeclaration(m) ? "constructor" : "property",
    isStatic: Boolean(m.modifiers?.some((k) => k.kind === ts.SyntaxKind.StaticKeyword)),
    optional: Boolean(m.questionToken),
  }));
}

/** The values the declarations export (classes, functions, consts), not the types. */
function declaredValues() {
  return declarations.statements
    .filter((s) => s.modifiers?.some((k) => k.kind === ts.SyntaxKind.ExportKeyword))
    .filter((s) => ts.isClassDeclaration(s) || ts.isFunctionDeclaration(s) || ts.isVariableStatement(s))
    .flatMap((s) => ts.isVariableStatement(s) ? s.declarationList.declarations.map((d) => d.name.getText(declarations)) : [s.name.text]);
}

/** Whether `cls` (source in `file`) has property `name`: a getter, or set as `this.name =` /
 * `client.name =` in its file. */
function hasProperty(cls, file, name) {
  if (Object.getOwnPropertyDescriptor(cls.prototype, name)?.get) return true;
  return new RegExp(`(this|client|remote)\\.${name}\\s*=[^=]`).test(read(file));
}

function checkImplements(declaredName, impls) {
  const problems = [];
  for (const m of declared(declaredName)) {
    if (m.kind === "constructor") continue;
    for (const { cls, file } of impls) {
      if (m.isStatic) {
        if (file !== impls[0].file) continue; // statics live on the exported class only
        if (typeof cls[m.name] !== "function" && !(m.name in cls)) problems.push(`${cls.name}.${m.name} (static) is missing`);
      } else if (m.kind === "method") {
        if (typeof cls.prototype[m.name] !== "function" && !m.optional) problems.push(`${cls.name}.prototype.${m.name}() is missing`);
      } else if (!m.optional && !hasProperty(cls, file, m.name)) {
        problems.push(`${cls.name} has no property ${m.name}`);
      }
    }
  }
  return problems;
}

const client = await import(new URL("split-client.js", web));
const { RemoteSplitClient, RemoteDeviceGroup } = await import(new URL("client/remote.js", web));
const { DeviceGroup } = await import(new URL("client/group.js", web));

const problems = [
  ...checkImplements("SplitClient", [
    { cls: client.SplitClient, file: "split-client.js" },
    { cls: RemoteSplitClient, file: "client/remote.js" },
  ]),
  // The declared interface's own methods (what `GroupState` adds are plain properties both set).
  ...checkImplements("DeviceGroup", [
    { cls: DeviceGroup, file: "client/group.js" },
    { cls: RemoteDeviceGroup, file: "client/remote.js" },
  ]),
  ...checkImplements("SplitChat", [{ cls: client.SplitChat, file: "client/chat.js" }]),
];
for (const name of declaredValues()) {
  if (!(name in client)) problems.push(`split-client.js does not export ${name}`);
}
const error = new client.SplitError("busy", "a test");
if (!(error instanceof Error) || error.code !== "busy" || error.name !== "SplitError") problems.push("SplitError is not an Error with a code and its name");

assert.deepEqual(problems, [], `split-client.d.ts and the code disagree:\n  ${problems.join("\n  ")}`);
const counted = ["SplitClient", "DeviceGroup", "SplitChat"].map((c) => declared(c).length).reduce((a, b) => a + b);
console.log(`dts-check: ${counted} declared members of SplitClient, DeviceGroup and SplitChat found in the code, and ${declaredValues().length} exports`);

// The demo's live camera: frames classified one after another with the split and codec the page
// shows, as a camera stream (`stream: true`: after a keyframe each frame's features are coded
// against the previous frame's, so a still scene costs few bytes). Frames per second and bytes
// per second are shown as they go.

/** Frames are grabbed with this short side: the model crops 224 of every 256, so more pixels
 * would only cost encoding time. */
const SHORT_SIDE = 256;

export class LiveCamera {
  /**
   * @param {object} client  a `SplitClient`
   * @param {HTMLVideoElement} video
   * @param {() => { split: string, codec: string }} choice  the page's current split and codec
   * @param {(r: object | null, stats: object) => void} onFrame  each answer, with running stats
   */
  constructor(client, video, choice, onFrame) {
    Object.assign(this, { client, video, choice, onFrame });
    this.stream = null;
    this.running = false;
  }

  /** Open the camera and classify until `stop()`; rejects with a readable message when there
   * is no camera or the user refuses it. */
  async start() {
    if (!navigator.mediaDevices?.getUserMedia) {
      throw new Error("this browser gives pages no camera (it needs HTTPS or localhost)");
    }
    try {
      this.stream = await navigator.mediaDevices.getUserMedia({ video: { facingMode: "environment" }, audio: false });
    } catch (e) {
      const why = { NotFoundError: "no camera was found", NotAllowedError: "camera access was refused" }[e.name];
      throw new Error(why ?? `the camera could not be opened: ${e.message}`);
    }
    this.video.srcObject = this.stream;
    await this.video.play();
    this.running = true;
    this.loop().catch((e) => this.onFrame(null, { error: e }));
  }

  async loop() {
    const started = performance.now();
    let frames = 0;
    let bytes = 0;
    while (this.running) {
      const image = await this.grab();
      const { split, codec } = this.choice();
      const r = await this.client.classify(image, split, { codec, stream: true });
      frames++;
      bytes += r.bytesSent;
      const seconds = (performance.now() - started) / 1000;
      if (this.running) this.onFrame(r, { frames, fps: frames / seconds, bytesPerSecond: bytes / seconds, lastBytes: r.bytesSent });
    }
  }

  /** The current video frame as a JPEG, short side `SHORT_SIDE`. */
  async grab() {
    const { videoWidth: w, videoHeight: h } = this.video;
    const scale = SHORT_SIDE / Math.min(w, h);
    const canvas = new OffscreenCanvas(Math.round(w * scale), Math.round(h * scale));
    canvas.getContext("2d").drawImage(this.video, 0, 0, canvas.width, canvas.height);
    return new Uint8Array(await (await canvas.convertToBlob({ type: "image/jpeg", quality: 0.9 })).arrayBuffer());
  }

  stop() {
    this.running = false;
    for (const track of this.stream?.getTracks() ?? []) track.stop();
    this.stream = null;
    this.video.srcObject = null;
  }
}

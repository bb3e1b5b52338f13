; The Windows installer of Agentloom, built by `bash scripts/package.sh --windows` (makensis).
; Installs for the current user (no administrator needed) into
; %LOCALAPPDATA%\Programs\Agentloom: agentloom.exe, its icon and an uninstaller; a Start menu
; entry; the "Agentloom graph" file type; an entry in Settings > Apps to uninstall it.
;
; Windows knows a file's type by its last extension, so a *.agentloom.json file is a .json
; file to Explorer: Agentloom is offered for every .json file under "Open with", and a
; double-click opens graphs in it once the user picks it as the app for .json files. The
; ".agentloom.json" key is written as well, for tools that read the full name.
;
; Defined by the caller with -D: VERSION (e.g. 0.1.0), EXE (agentloom.exe to install),
; ICON (agentloom.ico), OUTFILE (the installer to write); COMPRESSOR if not /SOLID lzma.

Unicode true
!ifdef COMPRESSOR
  SetCompressor ${COMPRESSOR}
!else
  SetCompressor /SOLID lzma
!endif

!ifndef VERSION | EXE | ICON | OUTFILE
  !error "makensis needs -DVERSION=… -DEXE=… -DICON=… -DOUTFILE=… (see scripts/package-windows.sh)"
!endif

!define PRODUCT "Agentloom"
!define PROGID "Agentloom.Graph"
!define UNINSTALL_KEY "Software\Microsoft\Windows\CurrentVersion\Uninstall\Agentloom"

Name "${PRODUCT} ${VERSION}"
OutFile "${OUTFILE}"
Icon "${ICON}"
UninstallIcon "${ICON}"
InstallDir "$LOCALAPPDATA\Programs\Agentloom"
InstallDirRegKey HKCU "${UNINSTALL_KEY}" "InstallLocation"
RequestExecutionLevel user
ShowInstDetails show

VIProductVersion "${VERSION}.0"
VIAddVersionKey "ProductName" "${PRODUCT}"
VIAddVersionKey "ProductVersion" "${VERSION}"
VIAddVersionKey "FileVersion" "${VERSION}"
VIAddVersionKey "FileDescription" "${PRODUCT} ${VERSION} setup"
VIAddVersionKey "LegalCopyright" "MIT OR Apache-2.0"

Page directory
Page instfiles
UninstPage uninstConfirm
UninstPage instfiles

Section "Agentloom"
  SetOutPath "$INSTDIR"
  File "/oname=agentloom.exe" "${EXE}"
  File "/oname=agentloom.ico" "${ICON}"
  WriteUninstaller "$INSTDIR\uninstall.exe"

  ; Start menu
  CreateShortcut "$SMPROGRAMS\Agentloom.lnk" "$INSTDIR\agentloom.exe" "" "$INSTDIR\agentloom.ico"

  ; The file type: what opens it, its name and icon.
  WriteRegStr HKCU "Software\Classes\${PROGID}" "" "Agentloom graph"
  WriteRegStr HKCU "Software\Classes\${PROGID}\DefaultIcon" "" "$INSTDIR\agentloom.ico"
  WriteRegStr HKCU "Software\Classes\${PROGID}\shell\open\command" "" '"$INSTDIR\agentloom.exe" "%1"'
  WriteRegStr HKCU "Software\Classes\.agentloom.json" "" "${PROGID}"
  WriteRegStr HKCU "Software\Classes\.agentloom.json" "Content Type" "application/x-agentloom-graph"
  WriteRegStr HKCU "Software\Classes\.json\OpenWithProgids" "${PROGID}" ""
  WriteRegStr HKCU "Software\Classes\Applications\agentloom.exe" "FriendlyAppName" "Agentloom"
  WriteRegStr HKCU "Software\Classes\Applications\agentloom.exe\SupportedTypes" ".json" ""
  WriteRegStr HKCU "Software\Classes\Applications\agentloom.exe\shell\open\command" "" '"$INSTDIR\agentloom.exe" "%1"'
  ; SHCNE_ASSOCCHANGED: Explorer reads the associations again.
  System::Call 'shell32::SHChangeNotify(i 0x08000000, i 0, p 0, p 0)'

  ; Settings > Apps
  WriteRegStr HKCU "${UNINSTALL_KEY}" "DisplayName" "${PRODUCT}"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "DisplayVersion" "${VERSION}"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "DisplayIcon" "$INSTDIR\agentloom.ico"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "Publisher" "Agentloom developers"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "InstallLocation" "$INSTDIR"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "UninstallString" '"$INSTDIR\uninstall.exe"'
  WriteRegDWORD HKCU "${UNINSTALL_KEY}" "NoModify" 1
  WriteRegDWORD HKCU "${UNINSTALL_KEY}" "NoRepair" 1
SectionEnd

; Removes what the installer made; the user's run log, credentials index and settings
; (%APPDATA%\agentloom) and the secrets in the Credential Manager are kept.
Section "Uninstall"
  Delete "$INSTDIR\agentloom.exe"
  Delete "$INSTDIR\agentloom.ico"
  Delete "$INSTDIR\uninstall.exe"
  RMDir "$INSTDIR"
  Delete "$SMPROGRAMS\Agentloom.lnk"
  DeleteRegKey HKCU "Software\Classes\${PROGID}"
  DeleteRegKey HKCU "Software\Classes\.agentloom.json"
  DeleteRegValue HKCU "Software\Classes\.json\OpenWithProgids" "${PROGID}"
  DeleteRegKey HKCU "Software\Classes\Applications\agentloom.exe"
  DeleteRegKey HKCU "${UNINSTALL_KEY}"
  System::Call 'shell32::SHChangeNotify(i 0x08000000, i 0, p 0, p 0)'
SectionEnd
